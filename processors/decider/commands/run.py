"""Decide handlers for the run itself: lifecycle, turns, approvals, budget, timers.

`HANDLERS` maps every command type but run.create to its handler; a test checks it covers
the whole command contract.
"""

from __future__ import annotations

import hashlib
import re
from typing import Any

from runfacts.partitioning import partition_for
from runfacts.processors.decider.commands import children, compensation, tools
from runfacts.processors.decider.commands import memory as memory_commands
from runfacts.processors.decider.context import DecideContext, Draft, Handler, Rejected, draft, state_hash
from runfacts.processors.decider.evolve import action_hash
from runfacts.processors.decider.state import RunState, ToolCallState
from runfacts.processors.decider.timers import CLAIM_WAIT, claim_due
from runfacts.schemas import commands as cmd
from runfacts.schemas import events as ev
from runfacts.schemas.common import CommandBase, RunVersions

ACTIVE = frozenset({"created", "running", "waiting_for_approval", "waiting_for_review", "needs_review"})


def _require_active(c: CommandBase, state: RunState) -> None:
    if state.status == "cancelling":
        raise Rejected(c, "run_cancelling")
    if state.status == "compensating":
        raise Rejected(c, "run_compensating", "the run is undoing its completed calls; it ends compensated "
                       "or needs_review")
    if state.terminal:
        raise Rejected(c, "run_ended", f"run is {state.status}")


def create_run(c: cmd.CreateRun, ctx: DecideContext) -> list[Draft]:
    """A new run, started on the runtime's current versions."""
    p = c.payload
    if p.versions != ctx.current_versions:
        raise Rejected(c, "incompatible_versions", _diff(p.versions, ctx.current_versions))
    if ctx.drained:
        _refuse_drained(c, p.versions, ctx.drained)
    return [
        draft(ev.RunCreated, goalRef=p.goalRef, goalSummary=p.goalSummary, userId=p.userId,
              tenant=p.tenant, budget=p.budget, versions=p.versions, actor=c.actor),
        draft(ev.RunStarted, versions=p.versions),
    ]


def _refuse_drained(c: cmd.CreateRun, versions: RunVersions, drained: frozenset[tuple[str, str]]) -> None:
    pinned = versions.model_dump()
    for dimension in DRAIN_DIMENSIONS:
        if (dimension, pinned[dimension]) in drained:
            version = pinned[dimension]
            raise Rejected(c, "version_draining", f"{dimension} {version} is draining (runfacts runs drain): no new "
                           f"run starts on it; start runs once the decider runs the version that replaces it, or "
                           f"end the drain: runfacts runs drain --version {version} --dimension {dimension} --undo")


def _diff(have: object, want: object) -> str:
    a, b = have.model_dump(), want.model_dump()  # type: ignore[attr-defined]
    return ", ".join(f"{k}: {a[k]} != {b[k]}" for k in a if a[k] != b[k])


def start_turn(c: cmd.StartTurn, state: RunState, ctx: DecideContext) -> list[Draft]:
    if state.status != "running":
        raise Rejected(c, "run_not_active", f"run is {state.status}")
    if state.activeTurnId is not None:
        raise Rejected(c, "turn_active", f"{state.activeTurnId} has not completed")
    return [draft(ev.TurnStarted, turnId=c.payload.turnId, turnNumber=state.turnCount + 1)]


def complete_turn(c: cmd.CompleteTurn, state: RunState, ctx: DecideContext) -> list[Draft]:
    if state.activeTurnId != c.payload.turnId:
        raise Rejected(c, "turn_not_active", f"active turn is {state.activeTurnId}")
    return [draft(ev.TurnCompleted, turnId=c.payload.turnId, turnNumber=state.turnCount)]


def record_reasoning(c: cmd.RecordReasoning, state: RunState, ctx: DecideContext) -> list[Draft]:
    _require_active(c, state)
    p = c.payload
    return [draft(ev.ReasoningRecorded, turnId=p.turnId, reasoningObjectId=p.reasoningObjectId,
                  goalRef=p.goalRef, evidenceRefs=list(p.evidenceRefs),
                  conclusionHash=p.conclusionHash, conclusionRef=p.conclusionRef)]


def resume(c: cmd.ResumeRun, state: RunState, ctx: DecideContext) -> list[Draft]:
    """Decide an approval: exactly once, in time, on the same arguments, by the right role."""
    p = c.payload
    approval = _decidable_approval(c, state)
    if c.issuedAt >= approval.expiresAt:
        raise Rejected(c, "approval_expired", f"expired at {approval.expiresAt.isoformat()}")
    if p.argsHash != approval.argsHash:
        raise Rejected(c, "args_changed", "the approval binds to other arguments")
    _check_display(c, approval.displayDigest)
    call = state.toolCalls[approval.toolCallId]
    manifest = tools.manifest_for(c, ctx, call.capabilityId)
    denied = ctx.check_approver(manifest, c.actor, approval.requesters)
    if denied == "self_approval_forbidden":
        raise Rejected(c, denied, f"{c.actor.subjectId} is a requester of {approval.approvalId} (the run's user, "
                       f"its creator or the proposer): another {approval.requiredRole} must decide it")
    if denied is not None:
        raise Rejected(c, denied, f"{c.actor.subjectId} for {approval.requiredRole} approval")
    if ctx.verify_token is not None:
        bad = ctx.verify_token(c, approval)
        if bad is not None:
            raise Rejected(c, bad)
    run_versions = state.checkpoint.versions if state.checkpoint else state.versions
    if run_versions != ctx.current_versions:
        raise Rejected(c, "incompatible_versions",
                       _diff(run_versions, ctx.current_versions) + "; send run.migrate first")
    ids = {"approvalId": approval.approvalId, "toolCallId": approval.toolCallId, "argsHash": p.argsHash}
    lease = None
    if p.decision == "approve":
        fresh = call.attempts == 0 and call.closedReason is None and not call.revoked
        lease = tools.lease_at_once(state, ctx, manifest, call.leaseEpoch) if fresh else None
        drafts = [draft(ev.ApprovalGranted, **ids, actor=c.actor, displayDigest=approval.displayDigest),
                  draft(ev.ToolCallAuthorized, capabilityId=call.capabilityId, **ids, leaseEpoch=lease)]
    else:
        drafts = [draft(ev.ApprovalRejected, **ids, actor=c.actor)]
    if len(state.open_approvals()) == 1 and state.status == "waiting_for_approval":
        drafts.append(draft(ev.RunResumed, approvalId=approval.approvalId, actor=c.actor))
    if lease is not None:  # ADR 0011: the authorization is the dispatch
        drafts += tools.dispatch_drafts(call.capabilityId, call.turnId, call.toolCallId,
                                        action_hash(call.capabilityId, call.argsHash), 1, call.idempotencyKey,
                                        tools.external_request_id(call.toolCallId, 1), lease, approval.approvalId)
    return drafts


def _check_display(c: cmd.ResumeRun, bound: str | None) -> None:
    """A decision that names the display its approver saw must name the approval's (a resume
    without one, v1, is bound by its signed token, which covers the approval's digest)."""
    shown = c.payload.displayDigest
    if shown is not None and shown != bound:
        raise Rejected(c, "display_changed", f"the approver saw display {shown[:12]}, the approval shows "
                       f"{(bound or 'none')[:12]}: list the approval again and decide on what it shows")


def _decidable_approval(c: cmd.ResumeRun, state: RunState):  # noqa: ANN202
    if state.status in ("cancelling", "cancelled"):
        raise Rejected(c, "run_cancelled", "a late approval cannot revive a cancelled run")
    if state.terminal:
        raise Rejected(c, "run_ended", f"run is {state.status}")
    approval = state.approvals.get(c.payload.approvalId)
    if approval is None:
        raise Rejected(c, "unknown_approval", c.payload.approvalId)
    if approval.status != "open":
        reason = {"expired": "approval_expired", "invalidated": "approval_invalidated"}.get(
            approval.status, "approval_already_decided")
        raise Rejected(c, reason, f"{approval.approvalId} is {approval.status}")
    return approval


def _closing(state: RunState, reason: str) -> list[Draft]:
    """Invalidate every open approval (stop, cancel, completion, failure)."""
    return [draft(ev.ApprovalInvalidated, approvalId=a.approvalId, toolCallId=a.toolCallId,
                  reason=reason) for a in state.open_approvals()]


def _final_checkpoint(state: RunState) -> Draft:
    return draft(ev.CheckpointSaved, node="final", stateHash=state_hash(state), versions=state.versions)


# --- run-end hygiene as facts (SEMANTICS.md §10: run state is temporary) ----------------
# When a run completes, fails, is cancelled or archived, besides invalidating its open
# approvals (`_closing`) the decider emits one `grant.revoked` per run-scoped grant still
# alive (a granted approval not consumed: `approval`; an authorized call not claimed:
# `authorization`; a call in flight: its dispatch `lease`) and one `checkpoint.archived`
# (a retention marker: the run's checkpoints serve no recovery any more). A revoked grant
# is refused at every later use: a claim (`grant_revoked`) and a dispatcher retry
# (`dispatcher.core.refusal`).

END_REASONS: dict[str, str] = {"completed": "run_completed", "failed": "run_failed", "cancelled": "run_cancelled",
                               "compensated": "run_compensated"}


def _grant_kind(state: RunState, call: ToolCallState) -> str | None:
    """Which run-scoped grant `call` still holds, or None."""
    if call.revoked:
        return None
    approval = state.approvals.get(call.approvalId or "")
    if approval is not None and approval.status == "granted":
        return "approval"
    if call.in_flight:
        return "lease"
    if call.awaiting_claim:
        return "authorization"
    return None


def end_of_run(state: RunState, reason: str, final: Draft | None = None) -> list[Draft]:
    """The revocations and the checkpoint archive a run's end owes (nothing twice); `final`
    is the run's final checkpoint, drafted alongside."""
    drafts = []
    for call in state.toolCalls.values():
        kind = _grant_kind(state, call)
        if kind is not None:
            approval_id = call.approvalId if kind == "approval" else None
            drafts.append(draft(ev.GrantRevoked, capabilityId=call.capabilityId, toolCallId=call.toolCallId,
                                approvalId=approval_id, grantKind=kind, reason=reason))
    if not state.checkpointsArchived:
        last: Any = final.payload if final is not None else state.checkpoint
        drafts.append(draft(ev.CheckpointsArchived, node=last.node if last else None,
                            stateHash=last.stateHash if last else None, reason=reason))
    return drafts


def stop(c: cmd.StopRun | cmd.CancelRun, state: RunState, ctx: DecideContext) -> list[Draft]:
    """Stop new work; the run is cancelled once no call is in flight (see follow_ups)."""
    _require_active(c, state)
    return _closing(state, "run_cancelled") + [
        draft(ev.RunCancelRequested, reason=c.payload.reason or c.commandType, actor=c.actor)]


def complete(c: cmd.CompleteRun, state: RunState, ctx: DecideContext) -> list[Draft]:
    _require_active(c, state)
    in_flight = [call.toolCallId for call in state.in_flight_calls()]
    if in_flight:
        raise Rejected(c, "tool_calls_in_flight", ", ".join(in_flight))
    live = [child.childRunId for child in state.live_children()]
    if live:
        raise Rejected(c, "children_running", ", ".join(live) + ": wait for their reports, or cancel the run")
    pending = [k for k, call in state.toolCalls.items() if call.verification == "pending"]
    final = _final_checkpoint(state)
    return _closing(state, "run_ended") + [
        draft(ev.RunCompleted, outcomeRef=c.payload.outcomeRef, pendingVerifications=pending),
        final, *end_of_run(state, END_REASONS["completed"], final)]


def fail(c: cmd.FailRun, state: RunState, ctx: DecideContext) -> list[Draft]:
    """The run fails: at once, or first undoing its completed calls that declare a compensation."""
    _require_active(c, state)
    if compensation.todo(state):
        in_flight = [call.toolCallId for call in state.in_flight_calls()]
        if in_flight:
            raise Rejected(c, "tool_calls_in_flight", f"{', '.join(in_flight)}: cancel the run (run.cancel) "
                           "to wait for them before its completed calls are compensated")
        detail = f"{c.payload.errorClass}: {c.payload.detail}" if c.payload.detail else c.payload.errorClass
        return _closing(state, "run_ended") + compensation.start(state, c, ctx, "run_failed", detail)
    final = _final_checkpoint(state)
    return _closing(state, "run_ended") + [
        draft(ev.RunFailed, errorClass=c.payload.errorClass, detail=c.payload.detail),
        final, *end_of_run(state, END_REASONS["failed"], final)]


def resolve_compensation(c: cmd.ResolveCompensation, state: RunState, ctx: DecideContext) -> list[Draft]:
    """A person resolves the undo that stopped the run (`compensation.resolve`): retry it, count it
    done by hand (the older undos go on: `follow_ups`), or give up: the run ends failed
    (`compensation_abandoned`), the calls left undone named, with the run-end hygiene of a failure."""
    drafts = compensation.resolve(c, state, ctx)
    if c.payload.decision != "give_up":
        return drafts
    left = ", ".join(getattr(drafts[0].payload, "notUndone", ()))
    note = c.payload.note.strip()
    final = _final_checkpoint(state)
    return _closing(state, "run_ended") + drafts + [
        draft(ev.RunFailed, errorClass="compensation_abandoned",
              detail=f"{c.actor.subjectId} gave up undoing {left}: {note}"),
        final, *end_of_run(state, END_REASONS["failed"], final)]


def follow_ups(state: RunState | None, c: CommandBase, ctx: DecideContext) -> list[Draft]:
    """Consequences of the new state: a cancellation completes when nothing is in flight and no
    child is live, after compensating the run's completed calls (`compensation.follow_up`)."""
    if state is None:
        return []
    undo = None if state.live_children() else compensation.follow_up(state, c, ctx)
    if undo is not None:
        drafts, ended = undo
        if not ended:
            return drafts
        final = _final_checkpoint(state)
        return [*drafts, final, *end_of_run(state, END_REASONS["compensated"], final)]
    if state.status != "cancelling" or state.in_flight_calls() or state.live_children():
        return []  # a cancellation waits for its calls in flight and for its children's ends
    unresolved = [k for k, call in state.toolCalls.items()
                  if call.execution == "result_unknown" and call.reconciliation != "not_found"]
    final = _final_checkpoint(state)
    return [draft(ev.RunCancelled, unresolvedToolCalls=unresolved), final,
            *end_of_run(state, END_REASONS["cancelled"], final)]


def record_feedback(c: cmd.RecordFeedback, state: RunState, ctx: DecideContext) -> list[Draft]:
    p = c.payload
    return [draft(ev.FeedbackRecorded, feedbackId=p.feedbackId, rating=p.rating, comment=p.comment,
                  targetTurnId=p.targetTurnId, targetToolCallId=p.targetToolCallId,
                  targetReasoningObjectId=p.targetReasoningObjectId, actor=c.actor)]


def save_checkpoint(c: cmd.SaveCheckpoint, state: RunState, ctx: DecideContext) -> list[Draft]:
    _require_active(c, state)
    p = c.payload
    return [draft(ev.CheckpointSaved, node=p.node, stateHash=p.stateHash, versions=p.versions)]


def debit(c: cmd.DebitBudget, state: RunState, ctx: DecideContext) -> list[Draft]:
    """Debit the budget; the first debit that would overdraw goes to review instead."""
    _require_active(c, state)
    p = c.payload
    over = tools._over_budget(state, p.amounts)
    if over:
        return over
    drafts = [draft(ev.BudgetDebited, amounts=p.amounts, actionHash=p.actionHash)]
    if state.actionCounts.get(p.actionHash, 0) + 1 >= ctx.loop_threshold and state.status != "needs_review":
        path = [*state.attemptedPath, p.actionHash][-32:]
        drafts.append(draft(ev.RunNeedsReview, reason="loop_detected", attemptedPath=path,
                            detail=f"{p.actionHash} repeated {ctx.loop_threshold} times"))
    return drafts


def update_progress(c: cmd.UpdateProgress, state: RunState, ctx: DecideContext) -> list[Draft]:
    _require_active(c, state)
    p = c.payload
    return [draft(ev.ProgressUpdated, verifiedItems=list(p.verifiedItems), openItems=list(p.openItems),
                  nextSafeAction=p.nextSafeAction)]


def archive(c: cmd.ArchiveRun, state: RunState, ctx: DecideContext) -> list[Draft]:
    if not state.terminal:
        raise Rejected(c, "run_not_ended", f"run is {state.status}")
    return [draft(ev.RunArchived, checkpointRef=c.payload.checkpointRef), *end_of_run(state, "run_archived")]


def migrate(c: cmd.MigrateRun, state: RunState, ctx: DecideContext) -> list[Draft]:
    """Move a run explicitly to the runtime's current versions (never silently)."""
    _require_active(c, state)
    if c.payload.versions != ctx.current_versions:
        raise Rejected(c, "unknown_versions", _diff(c.payload.versions, ctx.current_versions))
    old = state.checkpoint.versions if state.checkpoint else state.versions
    if old == c.payload.versions:
        raise Rejected(c, "already_current")
    return [draft(ev.RunMigrated, fromVersions=old, toVersions=c.payload.versions, actor=c.actor),
            draft(ev.CheckpointSaved, node=c.payload.toNode or "migrated", stateHash=state_hash(state),
                  versions=c.payload.versions)]


class TimerStale:
    """Marker: a timer whose target already moved on decides nothing (the one no-op)."""

    EVENTS: list[Draft] = []


def fire_timer(c: cmd.FireTimer, state: RunState, ctx: DecideContext) -> list[Draft]:
    """A decider timer fell due: expire an approval or a memory, end a reconciliation wait, stop on wall time."""
    p = c.payload
    if p.kind == "approval_expiry":
        return _expire_approval(c, state)
    if p.kind == "reconciliation_deadline":
        return _reconciliation_deadline(c, state)
    if p.kind == "claim_deadline":
        return _claim_deadline(c, state, ctx)
    if p.kind == "memory_expiry":
        return memory_commands.expire_memory(c, state)
    return _wall_budget(c, state)


def _claim_deadline(c: cmd.FireTimer, state: RunState, ctx: DecideContext) -> list[Draft]:
    """An authorized call nobody claimed in time (no dispatcher serves its capability?)."""
    call = state.toolCalls.get(c.payload.targetId)
    due = None if call is None else claim_due(call, ctx.capabilities)
    if call is None or due is None or c.issuedAt < due or state.status not in CLAIM_WAIT:
        return TimerStale.EVENTS
    within = ctx.capabilities.get(call.capabilityId).claim_within_ms
    return [draft(ev.RunNeedsReview, capabilityId=call.capabilityId, reason="unclaimed_tool_call",
                  detail=f"{call.toolCallId} ({call.capabilityId}) waited {within} ms for a claim: is a "
                         f"dispatcher with an adapter for {call.capabilityId} running?",
                  attemptedPath=list(state.attemptedPath))]


def _expire_approval(c: cmd.FireTimer, state: RunState) -> list[Draft]:
    """An open approval expires; so does a grant whose call still waits for a claim."""
    approval = state.approvals.get(c.payload.targetId)
    if approval is None or c.issuedAt < approval.expiresAt:
        return TimerStale.EVENTS
    call = state.toolCalls.get(approval.toolCallId)
    if approval.status != "open":
        waiting = call is not None and call.awaiting_claim and state.lapsed_grant(call, c.issuedAt)
        return tools.lapsed_authorization(state, call, approval) if waiting and call else TimerStale.EVENTS
    drafts = [draft(ev.ApprovalExpired, approvalId=approval.approvalId, toolCallId=approval.toolCallId,
                    expiresAt=approval.expiresAt)]
    if state.status == "waiting_for_approval" and len(state.open_approvals()) == 1:
        drafts.append(draft(ev.RunPaused, reason="approval_expired", approvalId=approval.approvalId,
                            detail="re-authorization needed: propose the call again"))
    return drafts


def _reconciliation_deadline(c: cmd.FireTimer, state: RunState) -> list[Draft]:
    call = state.toolCalls.get(c.payload.targetId)
    if (call is None or call.execution != "result_unknown" or call.reconcileDeadline is None
            or c.issuedAt < call.reconcileDeadline or state.status in ("needs_review", "cancelled")):
        return TimerStale.EVENTS
    return [draft(ev.RunNeedsReview, reason="unresolved_side_effect",
                  detail=f"{call.toolCallId}: outcome unknown past its reconciliation deadline")]


def _wall_budget(c: cmd.FireTimer, state: RunState) -> list[Draft]:
    limit = state.budget.limits.wallTimeMs
    elapsed = int((c.issuedAt - state.createdAt).total_seconds() * 1000)
    if limit <= 0 or elapsed < limit or state.status not in ACTIVE or state.status == "needs_review":
        return TimerStale.EVENTS
    return [draft(ev.BudgetExceeded, dimension="wall_time", limit=limit, used=elapsed),
            draft(ev.RunNeedsReview, reason="budget_exceeded", detail=f"wall time {elapsed} ms > {limit} ms",
                  attemptedPath=list(state.attemptedPath))]


HANDLERS: dict[str, Handler] = {
    "run.resume": resume,
    "run.stop": stop,
    "run.cancel": stop,
    "run.complete": complete,
    "run.fail": fail,
    "run.archive": archive,
    "run.migrate": migrate,
    "compensation.resolve": resolve_compensation,
    "turn.start": start_turn,
    "turn.complete": complete_turn,
    "reasoning.record": record_reasoning,
    "feedback.record": record_feedback,
    "checkpoint.save": save_checkpoint,
    "budget.debit": debit,
    "progress.update": update_progress,
    "timer.fire": fire_timer,
    "tool.call.propose": tools.propose,
    "tool.call.claim": tools.claim,
    "tool.call.report_accepted": tools.report_accepted,
    "tool.call.report_completed": tools.report_completed,
    "tool.call.report_failed": tools.report_failed,
    "tool.call.report_result_unknown": tools.report_unknown,
    "tool.call.request_reconciliation": tools.request_reconciliation,
    "tool.call.report_reconciled": tools.report_reconciled,
    "tool.call.retry": tools.retry,
    "tool.call.report_verification": tools.report_verification,
    "tool.call.report_held": tools.report_held,
    "memory.propose": memory_commands.propose_memory,
    "memory.review": memory_commands.review_memory,
    "memory.revoke": memory_commands.revoke_memory,
    **children.HANDLERS,
}


# --- the erasure of a data subject: `subject.erase` -> `subject.erased` (docs/decider.md "Erasure")
# Not a run: runId `erasure-<subjectRef>` (one partition per subject; a re-sent command gives the
# same event id), no state before or after, the subject named by its reference (a keyed digest),
# never its id. The decider holds no keys: `runfacts erase subject` tombstones them after the fact.
ERASURE_RUN_PREFIX = "erasure-"
SUBJECT_REF = re.compile(r"[a-z2-7]{26}")  # runfacts.privacy.envelope.REF_PATTERN


def erasure_run_id(subject_ref: str) -> str:
    """The run id an erasure of `subject_ref` travels under."""
    return ERASURE_RUN_PREFIX + subject_ref


def erase_subject(c: cmd.EraseSubject, state: RunState | None) -> list[Draft]:
    """One `subject.erased` fact, or a rejection naming what is wrong."""
    p = c.payload
    if state is not None:
        raise Rejected(c, "run_exists", "an erasure is not a command on a run")
    if not SUBJECT_REF.fullmatch(p.subjectRef):
        raise Rejected(c, "invalid_subject_ref", "expected 26 characters of base32 (runfacts.privacy.subject_ref)")
    if c.runId != erasure_run_id(p.subjectRef):
        raise Rejected(c, "invalid_erasure_run", f"runId must be {erasure_run_id(p.subjectRef)}")
    return [draft(ev.SubjectErased, subjectRef=p.subjectRef, requestRef=p.requestRef, actor=c.actor)]


# --- draining a version: `version.drain` -> `version.drained` (docs/decider.md "Draining")
# Not a run: `runfacts runs drain` sends one to every partition, under runId `drain-<digest>-<n>`
# (`drain_run_ids`: the first n whose id lands on that partition), no state before or after. The
# shell keeps the partition's drained set in its store; `create_run` refuses those versions.
DRAIN_RUN_PREFIX = "drain-"
DRAIN_DIMENSIONS = ("stateSchema", "modelRoute", "toolManifest", "policy")


def drain_run_ids(dimension: str, version: str, partitions: int) -> list[str]:
    """For each partition of the commands topic, the run id a drain of (dimension, version) goes
    to it under (the same ids for the same drain: a re-sent drain is the same facts)."""
    digest = hashlib.sha256(f"{dimension}\x00{version}".encode()).hexdigest()[:16]
    found: dict[int, str] = {}
    n = 0
    while len(found) < partitions:
        run_id = f"{DRAIN_RUN_PREFIX}{digest}-{n}"
        found.setdefault(partition_for(run_id.encode(), partitions), run_id)
        n += 1
    return [found[p] for p in range(partitions)]


def drain_version(c: cmd.DrainVersion, state: RunState | None) -> list[Draft]:
    """One `version.drained` fact, or a rejection naming what is wrong."""
    p = c.payload
    if state is not None or not c.runId.startswith(DRAIN_RUN_PREFIX):
        raise Rejected(c, "invalid_drain_run", f"a drain goes under a runId {DRAIN_RUN_PREFIX}<digest>-<n> "
                       "(runfacts runs drain), never a run's")
    if p.dimension not in DRAIN_DIMENSIONS:
        raise Rejected(c, "invalid_dimension", f"{p.dimension!r}: one of {', '.join(DRAIN_DIMENSIONS)}")
    return [draft(ev.VersionDrained, dimension=p.dimension, version=p.version, undo=p.undo, reason=p.reason,
                  actor=c.actor)]


# --- a capability's pause for the fleet: `tool.pause` / `tool.resume` (docs/dispatcher.md "Paused capabilities")
# Not a run: runId `tools-<capabilityId>` (one partition per capability, so a pause and its resume stay in
# order; a re-sent command is deduped like any command for no run). The decider records the fact; its shell
# also writes it to the compacted `<prefix>.tools.control` topic every dispatcher reads whole.
TOOL_CONTROL_RUN_PREFIX = "tools-"


def tool_control_run_id(capability_id: str) -> str:
    """The run id a pause or resume of `capability_id` travels under."""
    return TOOL_CONTROL_RUN_PREFIX + capability_id


def control_tool(c: cmd.PauseTool | cmd.ResumeTool, state: RunState | None, ctx: DecideContext) -> list[Draft]:
    """One `tool.paused` / `tool.resumed` fact, or a rejection naming what is wrong."""
    p = c.payload
    if state is not None:
        raise Rejected(c, "run_exists", "a pause is not a command on a run")
    if c.runId != tool_control_run_id(p.capabilityId):
        raise Rejected(c, "invalid_control_run", f"runId must be {tool_control_run_id(p.capabilityId)}")
    if p.capabilityId not in ctx.capabilities.capabilities:
        known = ", ".join(sorted(ctx.capabilities.capabilities)) or "none"
        raise Rejected(c, "unknown_capability", f"{p.capabilityId} is not in the capability manifest (known: {known})")
    if isinstance(c, cmd.PauseTool):
        if not p.reason.strip():
            raise Rejected(c, "reason_required", "a pause needs a reason: everyone whose call waits reads it")
        return [draft(ev.ToolPaused, capabilityId=p.capabilityId, reason=p.reason, actor=c.actor)]
    return [draft(ev.ToolResumed, capabilityId=p.capabilityId, reason=p.reason, actor=c.actor)]
