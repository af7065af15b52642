"""The user view: what a UI shows about a run, derived from run state only (pure).

`user_view(state, role) -> UserView | None` (None: no run, or the run is archived, which
the topic turns into a tombstone). Never from free text: the status line and the banner's
plain words are built from codes (status, reason codes, action, target, risk). Role
trimming: `user` gets the UI fields; `operator` adds operations detail; `auditor` adds the
personal fields. Run-state fields that hold personal data (the schema's `"pii": true`
fields the state copies: userId, goalSummary, subject ids, approval and call summaries,
lastError texts) appear only in auditor views; a property test checks it over random runs.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from typing import Literal, NamedTuple

from runfacts.processors.decider.state import RunState
from runfacts.projections.records import ProjectionSchema, load

FORMAT_VERSION = 1
Role = Literal["user", "operator", "auditor"]
ROLES: tuple[Role, ...] = ("user", "operator", "auditor")
ACTIVE = frozenset({"created", "running", "waiting_for_approval", "waiting_for_review",
                    "needs_review"})
"""Statuses in which StopRun is accepted (the decider's rule)."""
BUSY = frozenset({"created", "running", "cancelling", "compensating"})
DECISIONS = ("approve", "reject")
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
Publish = tuple[str, bytes, bytes | None]


class ApprovalBanner(NamedTuple):
    approvalId: str
    toolCallId: str
    asks: str
    risk: str
    requiredRole: str
    expiresAt: int
    allowedDecisions: tuple[str, ...]
    summary: str | None


class ViewProgress(NamedTuple):
    verified: tuple[str, ...]
    open: tuple[str, ...]
    nextSafeAction: str


class FailedCall(NamedTuple):
    toolCallId: str
    errorClass: str | None
    retryable: bool | None
    attempts: int


class OperatorDetail(NamedTuple):
    statusReason: str | None
    statusSince: int
    checkpointNode: str | None
    turnCount: int
    inFlight: tuple[str, ...]
    failedCalls: tuple[FailedCall, ...]
    openApprovals: int
    budgetUsed: dict[str, int]
    budgetLimits: dict[str, int]


class AuditorDetail(NamedTuple):
    userId: str
    goalSummary: str
    createdBy: str
    lastError: str | None


class UserView(NamedTuple):
    """One role's view of a run (field order = the Avro schema's)."""

    formatVersion: int
    runId: str
    role: str
    version: int
    lastUpdated: int
    status: str
    statusLine: str
    isBusy: bool
    approvalBanner: ApprovalBanner | None
    canStop: bool
    canRetry: tuple[str, ...]
    progress: ViewProgress
    operator: OperatorDetail | None
    auditor: AuditorDetail | None


def user_view(state: RunState | None, role: Role = "user") -> UserView | None:
    """The `role` view of a run; None when there is no run or it is archived."""
    if role not in ROLES:
        raise ValueError(f"unknown role {role!r}; expected one of {ROLES}")
    if state is None or state.archived:
        return None
    banner = approval_banner(state, role)
    progress = state.progress
    return UserView(
        FORMAT_VERSION, state.runId, role, state.version, millis(state.updatedAt), state.status,
        status_line(state, banner), state.status in BUSY, banner, state.status in ACTIVE,
        can_retry(state), ViewProgress(progress.verifiedItems, progress.openItems,
                                       progress.nextSafeAction),
        None if role == "user" else operator_detail(state),
        auditor_detail(state) if role == "auditor" else None)


def approval_banner(state: RunState, role: Role) -> ApprovalBanner | None:
    """The oldest open approval, in plain words (its summary text: auditors only)."""
    open_approvals = state.open_approvals()
    if not open_approvals or state.terminal or state.status == "cancelling":
        return None
    approval = open_approvals[0]
    call = state.toolCalls.get(approval.toolCallId)
    asks = (f"{call.action} on {call.target} ({approval.risk} risk)" if call is not None
            else f"tool call {approval.toolCallId} ({approval.risk} risk)")
    return ApprovalBanner(approval.approvalId, approval.toolCallId, asks, approval.risk,
                          approval.requiredRole, millis(approval.expiresAt), DECISIONS,
                          approval.summary if role == "auditor" else None)


def can_retry(state: RunState) -> tuple[str, ...]:
    """Failed, retryable, not closed calls of a running run (attempt limits: the decider's)."""
    if state.status != "running":
        return ()
    return tuple(c.toolCallId for c in state.toolCalls.values()
                 if c.execution == "failed" and c.retryable and c.closedReason is None)


_LINES = {
    "created": "Starting", "running": "Working", "cancelling": "Stopping",
    "completed": "Completed", "cancelled": "Cancelled",
}


_CHILD_REASONS = {  # docs/decisions/0012-child-runs.md
    "child_needs_review": lambda s: "child run " + ", ".join(
        sorted(k for k, c in s.children.items() if c.status == "needs_review")) + " needs a person",
    "evidence_conflict": lambda s: "a child run's evidence disagrees with evidence this run holds",
    "evidence_overflow": lambda s: "the evidence ledger is full: a child's evidence was not merged",
}


def status_line(state: RunState, banner: ApprovalBanner | None) -> str:
    """Plain words for the status, from codes only."""
    status, reason = state.status, state.statusReason
    if status == "waiting_for_approval":
        return f"Waiting for approval: {banner.asks}" if banner else "Waiting for approval"
    if status == "waiting_for_review":
        return f"Paused for review ({reason or 'requested'})"
    if status == "needs_review" and reason == "unclaimed_tool_call":
        unserved = sorted({c.capabilityId for c in state.toolCalls.values() if c.awaiting_claim})
        return f"Needs a person: unclaimed_tool_call ({', '.join(unserved)} not claimed by a dispatcher)"
    if status == "needs_review" and reason in _CHILD_REASONS:
        return f"Needs a person: {reason} ({_CHILD_REASONS[reason](state)})"
    if status == "needs_review" and state.compensating:
        return f"Needs a person: {reason or 'requested'} while undoing completed steps ({_undone(state)})"
    if status == "needs_review":
        return f"Needs a person: {reason or 'requested'}"
    if status in ("compensating", "compensated"):
        return _compensation_line(state)
    if status == "failed":
        return f"Failed ({reason or 'error'})"
    held = held_line(state)
    if held is not None and status == "running":
        return held
    line = _LINES.get(status, status)
    if status == "running" and state.turnCount:
        return f"{line} (turn {state.turnCount})"
    pending = sum(1 for c in state.toolCalls.values() if c.verification == "pending")
    if status == "completed" and pending:
        return f"{line}; {pending} verification(s) pending"
    return line


def _reversed(state: RunState) -> list[str]:
    """The completed steps already undone, newest first, as 'action on target'."""
    out = []
    for plan in reversed(state.compensations.values()):
        undo_id = plan.compensationToolCallId
        if undo_id is None and plan.resolution is None:
            continue
        undo = state.toolCalls.get(undo_id or "")
        done = plan.resolution == "done_by_hand" or ((undo.execution == "completed") if undo is not None else (
            state.settledCalls.get(undo_id or "", ("",))[0].startswith("completed")))
        if done:
            call = state.toolCalls.get(plan.toolCallId)
            step = f"{call.action} on {call.target}" if call is not None else plan.toolCallId
            out.append(f"{step} (by hand)" if plan.resolution == "done_by_hand" else step)
    return out


def _undone(state: RunState) -> str:
    return f"{len(_reversed(state))} of {len(state.compensations)} reversed"


def _compensation_line(state: RunState) -> str:
    """'Undoing completed steps (1 of 2 reversed): charge on order-001 reversed' and, at the end,
    'Cancelled; every completed step reversed: charge on order-001, reserve on order-001'."""
    why = "Failed" if state.compensating == "run_failed" else "Cancelled"
    done = _reversed(state)
    if state.status == "compensated":
        return f"{why}; every completed step reversed: {', '.join(done)}" if done else f"{why}; nothing to reverse"
    line = f"{why}: undoing completed steps ({_undone(state)})"
    return f"{line}: {', '.join(done)} reversed" if done else line


def held_line(state: RunState) -> str | None:
    """Why the run's calls wait for a paused capability (`tool.call.held`), in plain words, or None:
    "Waiting: payments.refund paused by olga: provider incident" (the operator and the reason given
    to `runfacts tools pause`; docs/dispatcher.md "Paused capabilities")."""
    holds = sorted({(c.capabilityId, c.held.pausedBy, c.held.reason) for c in state.toolCalls.values()
                    if c.held is not None and c.closedReason is None and not c.revoked})
    if not holds:
        return None
    return "Waiting: " + "; ".join(f"{cap} paused by {who}" + (f": {why}" if why else "") for cap, who, why in holds)


def operator_detail(state: RunState) -> OperatorDetail:
    """Operations detail without personal data."""
    failed = tuple(FailedCall(c.toolCallId, c.errorClass, c.retryable, c.attempts)
                   for c in state.toolCalls.values() if c.execution == "failed")
    return OperatorDetail(
        state.statusReason, millis(state.statusSince),
        state.checkpoint.node if state.checkpoint else None, state.turnCount,
        tuple(c.toolCallId for c in state.in_flight_calls()), failed,
        len(state.open_approvals()), dict(state.budget.used.__dict__),
        dict(state.budget.limits.__dict__))


def auditor_detail(state: RunState) -> AuditorDetail:
    """The personal fields an auditor may see."""
    return AuditorDetail(state.userId, state.goalSummary, state.createdBy.subjectId,
                         state.lastError)


def publisher(topic: str, role: Role = "user") -> Callable[[RunState], list[Publish]]:
    """A decider view hook (`DeciderShell.views`): the run's `role` view for `topic`, framed,
    keyed by runId; a tombstone (None) once the run is archived."""
    frame = schema().frame

    def publish(state: RunState) -> list[Publish]:
        view = user_view(state, role)
        return [(topic, state.runId.encode(), None if view is None else frame(encode(view)))]

    return publish


def millis(moment: datetime) -> int:
    """Epoch milliseconds of an aware datetime."""
    delta = moment - _EPOCH
    return (delta.days * 86_400 + delta.seconds) * 1000 + delta.microseconds // 1000


def schema() -> ProjectionSchema:
    """The user view's shipped schema."""
    return load("UserView")


def encode(view: UserView) -> bytes:
    """The view's Avro body (unframed)."""
    return schema().write_attrs(view)


def as_json(view: UserView) -> dict[str, object]:
    """The view as a JSON object (field names as in the schema)."""
    return _plain(view)  # type: ignore[return-value]


def _plain(value: object) -> object:
    if isinstance(value, tuple) and hasattr(value, "_fields"):
        return {k: _plain(v) for k, v in zip(value._fields, value, strict=True)}
    if isinstance(value, tuple | list):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    return value
