"""`evolve(state, event) -> state`: the run state as a left fold over the events log.

Pure and total: every event type has a case (`_APPLY`, checked against the contract by a
test), and an event that cannot apply to the state it meets raises `CorruptLog`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from runfacts.processors.decider.memory import apply_memory, remember_evidence
from runfacts.processors.decider.state import (
    ACTION_WINDOW,
    DEDUPE_WINDOW,
    KEEP_SETTLED,
    PATH_WINDOW,
    ApprovalState,
    Budget,
    Checkpoint,
    Progress,
    RunState,
    ToolCallState,
)
from runfacts.processors.policy.retry import call_idempotency_key
from runfacts.schemas import events as ev
from runfacts.schemas.common import BudgetAmounts
from runfacts.schemas.construct import trusted
from runfacts.schemas.errors import RunfactsError

Apply = Callable[[RunState, Any], dict[str, Any]]
CLOSABLE = frozenset({"proposed", "authorized"})


class CorruptLog(RunfactsError):
    """An event that cannot follow the state it meets: the log or the decider is wrong."""

    def __init__(self, event: ev.EventBase, why: str) -> None:
        super().__init__(f"run {event.runId}: event {event.eventId} ({event.eventType}): {why}")


def evolve(state: RunState | None, event: ev.EventBase) -> RunState | None:
    """The state after `event` (the first event of a run must be run.created)."""
    if state is None and isinstance(event, ev.CommandRejected | ev.SubjectErased):
        return None  # a command for a run that does not exist, or an erasure (not a run): nothing to change
    if state is None:
        if not isinstance(event, ev.RunCreated):
            raise CorruptLog(event, "first event of a run must be run.created")
        return _created(event)
    if isinstance(event, ev.CommandRejected):
        return _copy(state, {"recentCommands": _remember(state, event.payload.commandId)})
    apply = _APPLY.get(event.eventType)
    if apply is None:
        raise CorruptLog(event, "no evolve case for this event type")
    changes = apply(state, event)
    evidence = remember_evidence(state, event)
    if evidence is not None:
        changes["evidence"] = evidence
    changes.setdefault("version", state.version + 1)
    changes["updatedAt"] = event.occurredAt
    cause, recent = event.causationId, state.recentCommands
    if cause is not None and (not recent or recent[-1] != cause) and cause not in recent:
        changes["recentCommands"] = _remember(state, cause)
    return _copy(state, changes)


def _copy(state: RunState, changes: dict[str, Any]) -> RunState:
    """state with `changes` (values built from validated events: no re-validation)."""
    return trusted(RunState, {**state.__dict__, **changes})


def _replace(value: Any, **changes: Any) -> Any:
    """A frozen state value with `changes` (from validated events), without model_copy's cost."""
    return trusted(type(value), {**value.__dict__, **changes})


def fold(state: RunState | None, events: list[ev.EventBase]) -> RunState | None:
    """Apply events in order."""
    for event in events:
        state = evolve(state, event)
    return state


def _remember(state: RunState, command_id: str) -> tuple[str, ...]:
    return (*state.recentCommands, command_id)[-DEDUPE_WINDOW:]


def _created(e: ev.RunCreated) -> RunState:
    p = e.payload
    return RunState(
        runId=e.runId, status="created", version=1, tenant=p.tenant, createdBy=p.actor,
        userId=p.userId, goalRef=p.goalRef, goalSummary=p.goalSummary, createdAt=e.occurredAt,
        updatedAt=e.occurredAt, statusSince=e.occurredAt, versions=p.versions,
        budget=Budget(limits=p.budget),
        recentCommands=(e.causationId,) if e.causationId else (),
    )


def _status(state: RunState, event: ev.EventBase, status: str, reason: str | None) -> dict[str, Any]:
    return {"status": status, "statusReason": reason, "statusSince": event.occurredAt}


def _call(state: RunState, event: ev.EventBase, tool_call_id: str) -> ToolCallState:
    call = state.toolCalls.get(tool_call_id)
    if call is None:
        raise CorruptLog(event, f"unknown toolCallId {tool_call_id}")
    return call


def _with_call(state: RunState, event: ev.EventBase, tool_call_id: str, **changes: Any) -> dict[str, Any]:
    call = _replace(_call(state, event, tool_call_id), **changes)
    return {"toolCalls": {**state.toolCalls, tool_call_id: call}}


def _with_approval(state: RunState, event: ev.EventBase, approval_id: str, **changes: Any) -> dict[str, Any]:
    approval = state.approvals.get(approval_id)
    if approval is None:
        raise CorruptLog(event, f"unknown approvalId {approval_id}")
    return {"approvals": {**state.approvals, approval_id: _replace(approval, **changes)}}


def _close_call(state: RunState, event: ev.EventBase, approval_id: str, reason: str,
                changes: dict[str, Any]) -> dict[str, Any]:
    """Close the approval's tool call if it never ran (it never will now)."""
    approval = state.approvals[approval_id]
    calls = changes.get("toolCalls", state.toolCalls)
    call = calls.get(approval.toolCallId)
    if call is not None and call.execution in CLOSABLE and call.closedReason is None:
        calls = {**calls, call.toolCallId: _replace(call, closedReason=reason)}
        changes["toolCalls"] = calls
    return changes


# --- run lifecycle ---------------------------------------------------------------------

def _started(s: RunState, e: ev.RunStarted) -> dict[str, Any]:
    return {**_status(s, e, "running", None), "versions": e.payload.versions}


def _paused(s: RunState, e: ev.RunPaused) -> dict[str, Any]:
    status = "waiting_for_approval" if e.payload.reason == "waiting_for_approval" else "waiting_for_review"
    return _status(s, e, status, e.payload.reason)


def _resumed(s: RunState, e: ev.RunResumed) -> dict[str, Any]:
    return _status(s, e, "running", None)


def _needs_review(s: RunState, e: ev.RunNeedsReview) -> dict[str, Any]:
    path = tuple(e.payload.attemptedPath) or s.attemptedPath
    return {**_status(s, e, "needs_review", e.payload.reason), "attemptedPath": path}


def _completed(s: RunState, e: ev.RunCompleted) -> dict[str, Any]:
    return _status(s, e, "completed", None)


def _failed(s: RunState, e: ev.RunFailed) -> dict[str, Any]:
    return {**_status(s, e, "failed", e.payload.errorClass), "lastError": e.payload.errorClass}


def _cancel_requested(s: RunState, e: ev.RunCancelRequested) -> dict[str, Any]:
    calls = {
        k: _replace(c, closedReason="run_cancelled")
        if c.execution in CLOSABLE and c.closedReason is None else c
        for k, c in s.toolCalls.items()
    }
    return {**_status(s, e, "cancelling", "cancel_requested"), "toolCalls": calls}


def _cancelled(s: RunState, e: ev.RunCancelled) -> dict[str, Any]:
    return _status(s, e, "cancelled", None)


def _archived(s: RunState, e: ev.RunArchived) -> dict[str, Any]:
    return {"archived": True}


def _migrated(s: RunState, e: ev.RunMigrated) -> dict[str, Any]:
    return {"versions": e.payload.toVersions}


def _turn_started(s: RunState, e: ev.TurnStarted) -> dict[str, Any]:
    return {"activeTurnId": e.turnId, "turnCount": e.payload.turnNumber}


def _turn_completed(s: RunState, e: ev.TurnCompleted) -> dict[str, Any]:
    return {"activeTurnId": None}


def _nothing(s: RunState, e: ev.EventBase) -> dict[str, Any]:
    """A fact recorded in the log that changes no field but the version."""
    return {}


# --- approvals -----------------------------------------------------------------------

def _approval_required(s: RunState, e: ev.ApprovalRequired) -> dict[str, Any]:
    p = e.payload
    approval = ApprovalState(
        approvalId=p.approvalId, toolCallId=p.toolCallId, argsHash=p.argsHash, risk=p.risk,
        requiredRole=p.requiredRole, expiresAt=p.expiresAt, summary=p.summary,
        requestedBy=s.createdBy.subjectId,
    )
    changes = _with_call(s, e, p.toolCallId, approvalId=p.approvalId)
    return {**changes, "approvals": {**s.approvals, p.approvalId: approval}}


def _approval_granted(s: RunState, e: ev.ApprovalGranted) -> dict[str, Any]:
    p = e.payload
    return _with_approval(s, e, p.approvalId, status="granted", decidedBy=p.actor.subjectId,
                          decidedAt=e.occurredAt)


def _approval_rejected(s: RunState, e: ev.ApprovalRejected) -> dict[str, Any]:
    p = e.payload
    changes = _with_approval(s, e, p.approvalId, status="rejected", decidedBy=p.actor.subjectId,
                             decidedAt=e.occurredAt)
    return _close_call(s, e, p.approvalId, "approval_rejected", changes)


def _approval_expired(s: RunState, e: ev.ApprovalExpired) -> dict[str, Any]:
    """An open approval, or a grant that lapsed before a dispatch attempt: its call is closed
    (it needs a new approval), also a result_unknown call reconciled not_found."""
    changes = _with_approval(s, e, e.payload.approvalId, status="expired", decidedAt=e.occurredAt)
    call = s.toolCalls.get(e.payload.toolCallId)
    if call is not None and call.awaiting_claim and call.execution == "result_unknown":
        return _with_call(s, e, call.toolCallId, closedReason="approval_expired") | changes
    return _close_call(s, e, e.payload.approvalId, "approval_expired", changes)


def _approval_invalidated(s: RunState, e: ev.ApprovalInvalidated) -> dict[str, Any]:
    p = e.payload
    changes = _with_approval(s, e, p.approvalId, status="invalidated", decidedAt=e.occurredAt)
    return _close_call(s, e, p.approvalId, f"approval_{p.reason}", changes)


def _approval_consumed(s: RunState, e: ev.ApprovalConsumed) -> dict[str, Any]:
    return _with_approval(s, e, e.payload.approvalId, status="consumed")


# --- tool calls ------------------------------------------------------------------------

def _proposed(s: RunState, e: ev.ToolCallProposed) -> dict[str, Any]:
    p = e.payload
    if e.capabilityId is None:
        raise CorruptLog(e, "tool.call.proposed without capabilityId")
    call = ToolCallState(
        toolCallId=p.toolCallId, capabilityId=e.capabilityId, action=p.action, target=p.target,
        argsHash=p.argsHash, argsRef=p.argsRef, risk=p.risk, summary=p.summary,
        idempotencyKey=call_idempotency_key(s.runId, s.tenant, p.action, p.target, p.argsHash, p.businessKey),
        turnId=e.turnId, reasoningObjectId=e.reasoningObjectId, proposedAt=e.occurredAt,
    )
    action = action_hash(e.capabilityId, p.argsHash)
    room = _compacted(s)
    return {
        **room,
        "toolCalls": {**room.get("toolCalls", s.toolCalls), p.toolCallId: call},
        "actionCounts": _counted(s.actionCounts, action),
        "attemptedPath": (*s.attemptedPath, f"{p.action}:{p.target}:{p.argsHash[:12]}")[-PATH_WINDOW:],
    }


def _compacted(s: RunState) -> dict[str, Any]:
    """A new proposal makes room: settled calls beyond the KEEP_SETTLED most recent ones (by
    proposal order) shrink to an entry in settledCalls, with their decided approvals. Only at
    a proposal, so a call that just settled stays whole for whoever reacts to that event."""
    settled = [c for c in s.toolCalls.values() if c.settled]
    if len(settled) <= KEEP_SETTLED:
        return {}
    old = {c.toolCallId: c.outcome() for c in settled[:len(settled) - KEEP_SETTLED]}
    return {
        "toolCalls": {k: c for k, c in s.toolCalls.items() if k not in old},
        "approvals": {k: a for k, a in s.approvals.items() if a.toolCallId not in old or a.status == "open"},
        "settledCalls": {**s.settledCalls, **old},
    }


def _counted(counts: dict[str, int], action: str) -> dict[str, int]:
    """One more use of `action`, which becomes the most recent; only the ACTION_WINDOW most
    recently used actions are counted (a loop repeats recent actions)."""
    counted = dict(counts)  # a C-level copy; the pop moves `action` to the end
    counted[action] = counted.pop(action, 0) + 1
    if len(counted) > ACTION_WINDOW:
        del counted[next(iter(counted))]
    return counted


def action_hash(capability_id: str, args_hash: str) -> str:
    """The loop-detection key of a tool action."""
    return f"tool:{capability_id}:{args_hash}"


def _authorized(s: RunState, e: ev.ToolCallAuthorized) -> dict[str, Any]:
    return _with_call(s, e, e.payload.toolCallId, execution="authorized", claimableSince=e.occurredAt)


def _dispatching(s: RunState, e: ev.ToolCallDispatching) -> dict[str, Any]:
    p = e.payload
    return _with_call(s, e, p.toolCallId, execution="dispatching", attempts=p.attempt,
                      externalRequestId=p.externalRequestId, leaseEpoch=p.leaseEpoch,
                      dispatchedAt=e.occurredAt, claimableSince=None, reconciliation="none",
                      reconcileDeadline=None,
                      errorClass=None, retryable=None)


def _accepted(s: RunState, e: ev.ToolCallAccepted) -> dict[str, Any]:
    return _with_call(s, e, e.payload.toolCallId, execution="accepted", acceptedAt=e.occurredAt)


def _tool_completed(s: RunState, e: ev.ToolCallCompleted) -> dict[str, Any]:
    return _with_call(s, e, e.payload.toolCallId, execution="completed", finishedAt=e.occurredAt,
                      resultRef=e.payload.resultRef)


def _tool_failed(s: RunState, e: ev.ToolCallFailed) -> dict[str, Any]:
    p = e.payload
    return _with_call(s, e, p.toolCallId, execution="failed", errorClass=p.errorClass,
                      retryable=p.retryable, lastError=p.errorClass, finishedAt=e.occurredAt)


def _result_unknown(s: RunState, e: ev.ToolCallResultUnknown) -> dict[str, Any]:
    return _with_call(s, e, e.payload.toolCallId, execution="result_unknown",
                      lastError=e.payload.lastError or "result_unknown")


def _reconciliation_requested(s: RunState, e: ev.ToolCallReconciliationRequested) -> dict[str, Any]:
    return _with_call(s, e, e.payload.toolCallId, reconciliation="requested",
                      reconcileDeadline=e.payload.deadline)


def _reconciled(s: RunState, e: ev.ToolCallReconciled) -> dict[str, Any]:
    p = e.payload
    changes: dict[str, Any] = {"reconciliation": p.outcome}
    if p.outcome == "found_completed":
        changes.update(execution="completed", finishedAt=e.occurredAt, resultRef=p.resultRef)
    elif p.outcome == "found_failed":
        changes.update(execution="failed", errorClass="found_failed", retryable=False,
                       finishedAt=e.occurredAt)
    elif p.outcome == "not_found" and s.status == "cancelling":
        changes.update(closedReason="run_cancelled")
    elif p.outcome == "not_found":
        changes.update(claimableSince=e.occurredAt)
    return _with_call(s, e, p.toolCallId, **changes)


def _retry_requested(s: RunState, e: ev.ToolCallRetryRequested) -> dict[str, Any]:
    return _with_call(s, e, e.payload.toolCallId, execution="authorized", errorClass=None,
                      retryable=None, claimableSince=e.occurredAt)


def _verification(s: RunState, e: ev.VerificationUpdated) -> dict[str, Any]:
    return _with_call(s, e, e.payload.toolCallId, verification=e.payload.status)


# --- checkpoint, budget, progress --------------------------------------------------------

def _checkpoint(s: RunState, e: ev.CheckpointSaved) -> dict[str, Any]:
    p = e.payload
    return {"checkpoint": Checkpoint(node=p.node, stateHash=p.stateHash, versions=p.versions,
                                     savedAt=e.occurredAt)}


def _debited(s: RunState, e: ev.BudgetDebited) -> dict[str, Any]:
    used = add_amounts(s.budget.used, e.payload.amounts)
    action = e.payload.actionHash
    return {
        "budget": _replace(s.budget, used=used),
        "actionCounts": _counted(s.actionCounts, action),
    }


def add_amounts(a: BudgetAmounts, b: BudgetAmounts) -> BudgetAmounts:
    """Dimension-wise sum."""
    return BudgetAmounts(steps=a.steps + b.steps, toolCalls=a.toolCalls + b.toolCalls,
                         tokens=a.tokens + b.tokens, wallTimeMs=a.wallTimeMs + b.wallTimeMs,
                         costMicros=a.costMicros + b.costMicros)


def _progress(s: RunState, e: ev.ProgressUpdated) -> dict[str, Any]:
    p = e.payload
    return {"progress": Progress(verifiedItems=tuple(p.verifiedItems), openItems=tuple(p.openItems),
                                 nextSafeAction=p.nextSafeAction)}


def _revoked(s: RunState, e: ev.GrantRevoked) -> dict[str, Any]:
    """The call's grant ended with its run (`run_commands.end_of_run`): it is never claimed
    nor retried again; a call that never ran is closed; a revoked approval is not consumed."""
    p = e.payload
    call = _call(s, e, p.toolCallId)
    closed = "grant_revoked" if call.execution in CLOSABLE and call.closedReason is None else call.closedReason
    changes = _with_call(s, e, p.toolCallId, revoked=True, closedReason=closed)
    if p.approvalId is not None:
        changes |= _with_approval(s, e, p.approvalId, status="revoked", decidedAt=e.occurredAt)
    return changes


def _checkpoints_archived(s: RunState, e: ev.CheckpointsArchived) -> dict[str, Any]:
    return {"checkpointsArchived": True}


def _memory(s: RunState, e: ev.EventBase) -> dict[str, Any]:
    memory_id = getattr(e.payload, "memoryId", "")
    if not isinstance(e, ev.MemoryProposed) and memory_id not in s.memories:
        raise CorruptLog(e, f"unknown memoryId {memory_id}")
    return apply_memory(s, e)


_APPLY: dict[str, Apply] = {
    "run.started": _started,
    "run.paused": _paused,
    "run.resumed": _resumed,
    "run.needs_review": _needs_review,
    "run.completed": _completed,
    "run.failed": _failed,
    "run.cancel_requested": _cancel_requested,
    "run.cancelled": _cancelled,
    "run.archived": _archived,
    "run.migrated": _migrated,
    "turn.started": _turn_started,
    "turn.completed": _turn_completed,
    "reasoning.recorded": _nothing,
    "approval.required": _approval_required,
    "approval.granted": _approval_granted,
    "approval.rejected": _approval_rejected,
    "approval.expired": _approval_expired,
    "approval.invalidated": _approval_invalidated,
    "approval.consumed": _approval_consumed,
    "tool.call.proposed": _proposed,
    "tool.call.authorized": _authorized,
    "tool.call.dispatching": _dispatching,
    "tool.call.accepted": _accepted,
    "tool.call.completed": _tool_completed,
    "tool.call.failed": _tool_failed,
    "tool.call.result_unknown": _result_unknown,
    "tool.call.reconciliation_requested": _reconciliation_requested,
    "tool.call.reconciled": _reconciled,
    "tool.call.retry_requested": _retry_requested,
    "verification.updated": _verification,
    "checkpoint.saved": _checkpoint,
    "budget.debited": _debited,
    "budget.exceeded": _nothing,
    "progress.updated": _progress,
    "feedback.recorded": _nothing,
    "grant.revoked": _revoked,
    "checkpoint.archived": _checkpoints_archived,
    "memory.proposed": _memory,
    "memory.confirmed": _memory,
    "memory.rejected": _memory,
    "memory.revoked": _memory,
}
"""Every event type but run.created (no state yet) and command.rejected (no version change)."""
