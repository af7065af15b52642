"""Decide compensation: undo a run's completed side effects, newest first (docs/semantics.md §16). Pure.

1. A call of a capability whose manifest declares a `compensation` completes (reported, or
   reconciled `found_completed`): `compensation.planned` records the compensating call's
   arguments, derived now from the call's arguments and result (`policy.compensation.derive`),
   or the `problem` that keeps them from being derived.
2. The run is cancelled (once nothing is in flight) or fails (`run.fail`, nothing in flight)
   with planned compensations left: for the newest, `compensation.started` (the run is
   `compensating`) and the compensating call `<toolCallId>-undo`, an ordinary governed call:
   proposed with its own idempotency key, authorized by policy or waiting for an approval
   (the run stays `compensating`), claimed, reported, reconciled like any call.
3. Each compensating call that completes starts the next (`follow_up`); the last ends the run
   `run.compensated`. One that cannot complete (failed, its approval rejected or expired, an
   unknown outcome past its reconciliation deadline) or a plan with a problem ends in
   `run.needs_review` (`unresolved_side_effect`, naming the call): a person undoes the rest.
4. A person resolves the undo that stopped (`compensation.resolve`, operator: `resolve`):
   `retry` starts it again as a new governed call `<toolCallId>-undo-<n>` (the same arguments,
   so the same idempotency key: a tool that did undo it the first time answers with that undo);
   `done_by_hand` records that a person undid it, and the older undos go on; `give_up` ends the
   run `failed` (`compensation_abandoned`), the calls still to undo named in the fact.
Nothing is compensated twice: a plan records its compensating call's id when it starts, ids
are derived from the original call's, and a command replayed decides nothing (its id is seen).
"""

from __future__ import annotations

import json
from datetime import timedelta

from runfacts.processors.decider.context import DecideContext, Draft, Rejected, draft
from runfacts.processors.decider.state import CompensationPlan, RunState, ToolCallState
from runfacts.processors.policy.compensation import Underivable, derive, inline_ref
from runfacts.processors.policy.display import asks_approval, display_digest, problems, render
from runfacts.processors.policy.retry import args_hash
from runfacts.schemas import commands as cmd
from runfacts.schemas import events as ev
from runfacts.schemas.common import CommandBase
from runfacts.schemas.errors import ConfigError

ACTION = "compensate"
"""The `action` of every compensating call (its target is the original call's)."""
SUFFIX = "-undo"
RESOLUTIONS = ("retry", "done_by_hand", "give_up")
"""A person's decisions about an undo that stopped (`compensation.resolve`; the contract's pattern)."""


def compensation_call_id(tool_call_id: str, retries: int = 0) -> str:
    """The id of the call that undoes `tool_call_id` (`-undo`; after a person's n-th retry `-undo-<n+1>`)."""
    return tool_call_id + SUFFIX + (f"-{retries + 1}" if retries else "")


def plan(state: RunState, call: ToolCallState, ctx: DecideContext, result: str | None) -> list[Draft]:
    """`compensation.planned` for a call that just completed, when its capability declares one."""
    try:
        comp = ctx.capabilities.get(call.capabilityId).compensation
    except ConfigError:
        return []
    if comp is None or call.toolCallId in state.compensations:
        return []
    try:
        arguments, problem = derive(comp, call.display, result), None
    except Underivable as exc:
        arguments, problem = None, str(exc)
    return [draft(ev.CompensationPlanned, capabilityId=call.capabilityId, toolCallId=call.toolCallId,
                  compensationCapabilityId=comp.capability_id, arguments=arguments, problem=problem)]


def todo(state: RunState) -> list[CompensationPlan]:
    """Planned compensations not started yet (nor resolved by a person), newest completed call first."""
    return [p for p in reversed(state.compensations.values())
            if p.compensationToolCallId is None and p.resolution is None]


def start(state: RunState, c: CommandBase, ctx: DecideContext, reason: str, detail: str = "") -> list[Draft]:
    """Start undoing the newest planned call: `compensation.started` and its governed call, or
    needs_review when it cannot be undone automatically."""
    plans = todo(state)
    current, remaining = plans[0], [p.toolCallId for p in plans[1:]]
    comp_id = compensation_call_id(current.toolCallId, current.retries)
    if comp_id in state.toolCalls or comp_id in state.settledCalls:
        return _review(current, f"the id {comp_id} is taken by another call")
    ids = {"capabilityId": current.capabilityId}
    started = draft(ev.CompensationStarted, **ids, toolCallId=current.toolCallId, compensationToolCallId=comp_id,
                    compensationCapabilityId=current.capabilityId, reason=reason, remaining=remaining,
                    detail=detail)
    # a plan that cannot be carried out still starts (the run records that it compensates, and
    # why), with no call behind it: the run goes to a person, who resolves it (`resolve`)
    if current.problem is not None or current.arguments is None:
        return [started, *_review(current, current.problem or "no arguments")]
    try:
        manifest = ctx.capabilities.get(current.capabilityId)
    except ConfigError as exc:
        return [started, *_review(current, str(exc))]
    arguments = json.loads(current.arguments)
    schema = manifest.schema_or_none()
    display = render(arguments, schema, manifest.rule_fields())
    bad = problems(display, schema)
    if bad:
        return [started, *_review(current, "; ".join(bad))]
    digest, hashed = display_digest(display), args_hash(arguments)
    summary = f"Reverse {current.summary}"
    drafts = [
        started,
        draft(ev.ToolCallProposed, **ids, toolCallId=comp_id, argsHash=hashed,
              argsRef=inline_ref(current.arguments), target=current.target, action=ACTION,
              risk=manifest.risk.value, summary=summary, businessKey=None, display=display, displayDigest=digest),
    ]
    asks = manifest.needs_approval or (
        bool(manifest.approval_when) and asks_approval(manifest.approval_when, display, schema) is not None)
    if not asks:
        return drafts + [draft(ev.ToolCallAuthorized, **ids, toolCallId=comp_id, argsHash=hashed)]
    return drafts + [draft(
        ev.ApprovalRequired, **ids, approvalId=f"approval-{comp_id}", toolCallId=comp_id, argsHash=hashed,
        risk=manifest.risk.value, requiredRole=manifest.required_role,
        expiresAt=c.issuedAt + timedelta(milliseconds=manifest.approval_ttl_ms), summary=summary,
        display=display, displayDigest=digest, proposedBy=c.actor)]


def _review(current: CompensationPlan, why: str) -> list[Draft]:
    return [draft(ev.RunNeedsReview, reason="unresolved_side_effect",
                  detail=f"{current.toolCallId} cannot be undone by {current.capabilityId}: {why}; "
                         "undo it by hand")]


def _done(state: RunState, p: CompensationPlan) -> bool:
    """The plan's effect is undone: its compensating call completed, or a person undid it."""
    return p.resolution == "done_by_hand" or (
        p.compensationToolCallId is not None and _outcome(state, p.compensationToolCallId) == "done")


def _outcome(state: RunState, comp_id: str) -> str:
    """done | failed | pending: where a compensating call stands."""
    call = state.toolCalls.get(comp_id)
    if call is None:
        settled = state.settledCalls.get(comp_id)
        return "done" if settled is not None and settled[0].startswith("completed") else "failed"
    if call.execution == "completed":
        return "done"
    if call.execution == "failed" or (call.closedReason is not None and call.execution in ("proposed", "authorized")):
        return "failed"
    return "pending"


def follow_up(state: RunState, c: CommandBase, ctx: DecideContext) -> tuple[list[Draft], bool] | None:
    """What compensation makes of the new state: (drafts, whether they end the run
    `compensated`), or None when it has nothing to say (not cancelling nor compensating)."""
    if state.status == "cancelling":
        stuck = [p for p in state.compensations.values() if p.compensationToolCallId and not _done(state, p)]
        if state.in_flight_calls() or not todo(state) or stuck:  # a person cancels a review: no older undo
            return None
        return start(state, c, ctx, "run_cancelled"), False
    if state.status != "compensating":
        return None
    for p in state.compensations.values():
        if p.compensationToolCallId is None or p.resolution is not None:
            continue
        outcome = _outcome(state, p.compensationToolCallId)
        if outcome == "pending":
            return [], False
        if outcome == "failed":
            call = state.toolCalls.get(p.compensationToolCallId)
            how = "it ended" if call is None else (call.closedReason or f"failed ({call.errorClass})")
            return _review(p, f"its compensating call {p.compensationToolCallId} did not complete: {how}"), False
    if todo(state):
        return start(state, c, ctx, state.compensating or "run_cancelled"), False
    undone = [p.toolCallId for p in reversed(state.compensations.values()) if _done(state, p)]
    unresolved = [k for k, call in state.toolCalls.items()
                  if call.execution == "result_unknown" and call.reconciliation != "not_found"]
    return [draft(ev.RunCompensated, reason=state.compensating or "run_cancelled", compensatedToolCalls=undone,
                  unresolvedToolCalls=unresolved)], True


# --- a person resolves an undo that stopped (`compensation.resolve`, docs/semantics.md §16)
RESOLVABLE_EXECUTIONS = frozenset({"result_unknown"})
"""A compensating call in flight that a person may still resolve: its outcome is unknown (past its
reconciliation deadline); one dispatching or accepted is waited for (its report comes)."""


def stopped(state: RunState) -> CompensationPlan | None:
    """The plan whose undo stopped the run for a person: started, not undone, not resolved."""
    if state.status != "needs_review" or state.compensating is None:
        return None
    for p in reversed(state.compensations.values()):
        if p.compensationToolCallId is not None and p.resolution is None and not _done(state, p):
            return p
    return None


def resolve(c: cmd.ResolveCompensation, state: RunState, ctx: DecideContext) -> list[Draft]:
    """A person's decision about the undo that stopped: the `compensation.resolved` fact (the
    run's end on `give_up` is drafted by the caller, which owns the run-end hygiene)."""
    p = c.payload
    if state.terminal:
        raise Rejected(c, "run_ended", f"run is {state.status}")
    plan = stopped(state)
    if plan is None:
        raise Rejected(c, "no_stopped_compensation", f"run is {state.status} ({state.statusReason or 'no reason'}): "
                       "no undo of it stopped for a person (compensation.resolve settles only that)")
    if p.toolCallId != plan.toolCallId:
        raise Rejected(c, "not_the_stopped_compensation", f"the undo that stopped is {plan.toolCallId}'s "
                       f"({plan.compensationToolCallId}); resolve that one")
    if p.decision not in RESOLUTIONS:
        raise Rejected(c, "invalid_decision", f"{p.decision!r}: one of {', '.join(RESOLUTIONS)}")
    if p.decision != "retry" and not p.note.strip():
        raise Rejected(c, "note_required", f"{p.decision} needs a note: what was done by hand, or why the rest "
                       "is left undone (the audit chain keeps it)")
    call = state.toolCalls.get(plan.compensationToolCallId or "")
    if call is not None and call.in_flight and call.execution not in RESOLVABLE_EXECUTIONS:
        raise Rejected(c, "tool_calls_in_flight", f"{call.toolCallId} is {call.execution}: wait for its report")
    if p.decision == "retry" and (plan.problem is not None or plan.arguments is None):
        raise Rejected(c, "not_retryable", f"{plan.toolCallId}'s undo cannot be derived ({plan.problem}): undo it "
                       "by hand and send done_by_hand, or give_up")
    left = [plan.toolCallId, *(q.toolCallId for q in todo(state))] if p.decision == "give_up" else []
    return [draft(ev.CompensationResolved, capabilityId=plan.capabilityId, toolCallId=plan.toolCallId,
                  decision=p.decision, note=p.note, reason=state.compensating or "run_cancelled", notUndone=left,
                  actor=c.actor)]
