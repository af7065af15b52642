"""How the tool-call track's facts change the run's state: proposals (and the compaction of
settled calls they trigger), the execution and verification tracks, approvals and revoked
grants (the `evolve` cases of the events about one tool call or its approval). Pure.
"""

from __future__ import annotations

from typing import Any

from runfacts.processors.decider.evolve.run import CLOSABLE, Apply, CorruptLog, counted, replace_value
from runfacts.processors.decider.state import (
    KEEP_SETTLED,
    PATH_WINDOW,
    ApprovalState,
    CallHold,
    RunState,
    ToolCallState,
)
from runfacts.processors.policy.access import requesters
from runfacts.processors.policy.retry import call_idempotency_key
from runfacts.schemas import events as ev


def _call(state: RunState, event: ev.EventBase, tool_call_id: str) -> ToolCallState:
    call = state.toolCalls.get(tool_call_id)
    if call is None:
        raise CorruptLog(event, f"unknown toolCallId {tool_call_id}")
    return call


def _with_call(state: RunState, event: ev.EventBase, tool_call_id: str, **changes: Any) -> dict[str, Any]:
    call = replace_value(_call(state, event, tool_call_id), **changes)
    return {"toolCalls": {**state.toolCalls, tool_call_id: call}}


def _with_approval(state: RunState, event: ev.EventBase, approval_id: str, **changes: Any) -> dict[str, Any]:
    approval = state.approvals.get(approval_id)
    if approval is None:
        raise CorruptLog(event, f"unknown approvalId {approval_id}")
    return {"approvals": {**state.approvals, approval_id: replace_value(approval, **changes)}}


def _close_call(state: RunState, event: ev.EventBase, approval_id: str, reason: str,
                changes: dict[str, Any]) -> dict[str, Any]:
    """Close the approval's tool call if it never ran (it never will now)."""
    approval = state.approvals[approval_id]
    calls = changes.get("toolCalls", state.toolCalls)
    call = calls.get(approval.toolCallId)
    if call is not None and call.execution in CLOSABLE and call.closedReason is None:
        calls = {**calls, call.toolCallId: replace_value(call, closedReason=reason)}
        changes["toolCalls"] = calls
    return changes


def _approval_required(s: RunState, e: ev.ApprovalRequired) -> dict[str, Any]:
    p = e.payload
    approval = ApprovalState(
        approvalId=p.approvalId, toolCallId=p.toolCallId, argsHash=p.argsHash, risk=p.risk,
        requiredRole=p.requiredRole, expiresAt=p.expiresAt, summary=p.summary,
        requesters=requesters(s.userId, s.createdBy, p.proposedBy), displayDigest=p.displayDigest,
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


def _proposed(s: RunState, e: ev.ToolCallProposed) -> dict[str, Any]:
    p = e.payload
    if e.capabilityId is None:
        raise CorruptLog(e, "tool.call.proposed without capabilityId")
    call = ToolCallState(
        toolCallId=p.toolCallId, capabilityId=e.capabilityId, action=p.action, target=p.target,
        argsHash=p.argsHash, argsRef=p.argsRef, risk=p.risk, summary=p.summary,
        idempotencyKey=call_idempotency_key(s.runId, s.tenant, p.action, p.target, p.argsHash, p.businessKey),
        turnId=e.turnId, reasoningObjectId=e.reasoningObjectId, proposedAt=e.occurredAt,
        display=p.display, displayDigest=p.displayDigest,
    )
    action = action_hash(e.capabilityId, p.argsHash)
    room = _compacted(s)
    return {
        **room,
        "toolCalls": {**room.get("toolCalls", s.toolCalls), p.toolCallId: call},
        "actionCounts": counted(s.actionCounts, action),
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
                      reconcileDeadline=None, held=None,
                      errorClass=None, retryable=None)


def _accepted(s: RunState, e: ev.ToolCallAccepted) -> dict[str, Any]:
    return _with_call(s, e, e.payload.toolCallId, execution="accepted", acceptedAt=e.occurredAt)


def _tool_completed(s: RunState, e: ev.ToolCallCompleted) -> dict[str, Any]:
    return _with_call(s, e, e.payload.toolCallId, execution="completed", finishedAt=e.occurredAt,
                      resultRef=e.payload.resultRef, held=None)


def _tool_failed(s: RunState, e: ev.ToolCallFailed) -> dict[str, Any]:
    p = e.payload
    return _with_call(s, e, p.toolCallId, execution="failed", errorClass=p.errorClass,
                      retryable=p.retryable, lastError=p.errorClass, finishedAt=e.occurredAt, held=None)


def _result_unknown(s: RunState, e: ev.ToolCallResultUnknown) -> dict[str, Any]:
    return _with_call(s, e, e.payload.toolCallId, execution="result_unknown",
                      lastError=e.payload.lastError or "result_unknown", held=None)


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


def _held(s: RunState, e: ev.ToolCallHeld) -> dict[str, Any]:
    """The call waits for its paused capability (cleared by its next claim or outcome)."""
    p = e.payload
    hold = CallHold(pauseId=p.pauseId, pausedBy=p.pausedBy, reason=p.reason, pausedAt=p.pausedAt)
    return _with_call(s, e, p.toolCallId, held=hold)


def _verification(s: RunState, e: ev.VerificationUpdated) -> dict[str, Any]:
    return _with_call(s, e, e.payload.toolCallId, verification=e.payload.status)


def _revoked(s: RunState, e: ev.GrantRevoked) -> dict[str, Any]:
    """The call's grant ended with its run (`run_commands.end_of_run`): it is never claimed
    nor retried again; a call that never ran is closed; a revoked approval is not consumed."""
    p = e.payload
    call = _call(s, e, p.toolCallId)
    closed = "grant_revoked" if call.execution in CLOSABLE and call.closedReason is None else call.closedReason
    changes = _with_call(s, e, p.toolCallId, revoked=True, closedReason=closed, held=None)
    if p.approvalId is not None:
        changes |= _with_approval(s, e, p.approvalId, status="revoked", decidedAt=e.occurredAt)
    return changes




TOOL_APPLY: dict[str, Apply] = {
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
    "tool.call.held": _held,
    "verification.updated": _verification,
    "grant.revoked": _revoked,
}
"""The cases of the tool-call track's events."""
