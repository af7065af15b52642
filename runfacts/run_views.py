"""Views of a run's State for people, pure: the operator summary and the dashboard's user view.

Both are functions of `RunState` (and the clock passed in). The operator summary never
carries a field the contract marks personal (goalSummary, userId, subject ids, summaries,
free-text reasons and tool messages): an operator sees node, errors, budget and stuck time
only (SEMANTICS §12). The user view is trimmed by the viewer's roles: personal fields only for
roles that serve the person, buttons only where the policy would let the role act.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from runfacts.processors.run_state import TERMINAL, ApprovalState, RunState, ToolCallState

ACTIVE = frozenset({"created", "running", "waiting_for_approval", "waiting_for_review", "needs_review"})
REVIEW = frozenset({"needs_review", "waiting_for_review"})
BUSY = frozenset({"created", "running", "cancelling"})
# role names as in the default policy (processors/policy.toml); buttons follow the policy itself
# when the viewer carries `allowed` (policy.allowed_command_types), these sets otherwise
PERSONAL_ROLES = frozenset({"user", "support_agent", "supervisor", "auditor"})
STOP_ROLES = frozenset({"user", "support_agent", "supervisor", "operator"})
CANCEL_ROLES = STOP_ROLES
RETRY_ROLES = frozenset({"operator"})
STAFF_ROLES = frozenset({"support_agent", "supervisor", "operator", "auditor"})
BUDGET_DIMENSIONS = ("steps", "toolCalls", "tokens", "wallTimeMs", "costMicros")
_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h|d)?\s*$")
_UNITS = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400, None: 1}


def parse_duration(text: str) -> timedelta:
    """'90s', '10m', '2h', '1d' (bare numbers are seconds) -> timedelta."""
    match = _DURATION.match(text)
    if match is None:
        raise ValueError(f"duration {text!r}: expected a number and a unit (ms, s, m, h, d), e.g. 10m")
    return timedelta(seconds=float(match.group(1)) * _UNITS[match.group(2)])


def stuck_for(state: RunState, now: datetime) -> timedelta | None:
    """How long a run that has not ended has been in its status (None once it ended)."""
    if state.status in TERMINAL:
        return None
    return max(now - state.statusSince, timedelta(0))


# --- operator summary (no personal data) --------------------------------------------------

def operator_summary(state: RunState, now: datetime) -> dict[str, Any]:
    """What `runfacts inspect` shows: status, node, approvals, calls, budget, errors, stuck time."""
    stuck = stuck_for(state, now)
    return {
        "runId": state.runId, "status": state.status, "statusReason": state.statusReason,
        "statusSince": state.statusSince.isoformat(), "version": state.version,
        "stuckSeconds": None if stuck is None else round(stuck.total_seconds(), 1),
        "tenant": state.tenant, "archived": state.archived,
        "node": state.checkpoint.node if state.checkpoint else None,
        "checkpointAt": state.checkpoint.savedAt.isoformat() if state.checkpoint else None,
        "activeTurnId": state.activeTurnId, "turnCount": state.turnCount,
        "pendingApprovals": [_approval_row(a) for a in state.open_approvals()],
        "toolCalls": [_call_row(c) for c in state.toolCalls.values()],
        "budget": _budget(state),
        "errors": _errors(state),
        "nextSafeAction": state.progress.nextSafeAction,
        "openItems": len(state.progress.openItems), "verifiedItems": len(state.progress.verifiedItems),
        "attemptedPath": list(state.attemptedPath),
        "versions": state.versions.model_dump(),
    }


def _approval_row(a: ApprovalState) -> dict[str, Any]:
    return {"approvalId": a.approvalId, "toolCallId": a.toolCallId, "risk": a.risk,
            "requiredRole": a.requiredRole, "expiresAt": a.expiresAt.isoformat(), "status": a.status}


def _call_row(c: ToolCallState) -> dict[str, Any]:
    return {"toolCallId": c.toolCallId, "capabilityId": c.capabilityId, "action": c.action,
            "execution": c.execution, "verification": c.verification, "attempts": c.attempts,
            "errorClass": c.errorClass, "retryable": c.retryable, "reconciliation": c.reconciliation,
            "closedReason": c.closedReason, "risk": c.risk}


def _budget(state: RunState) -> dict[str, dict[str, int]]:
    limits, used = state.budget.limits.model_dump(), state.budget.used.model_dump()
    return {d: {"used": used[d], "limit": limits[d]} for d in BUDGET_DIMENSIONS}


def _errors(state: RunState) -> list[str]:
    found = [f"run: {state.lastError}"] if state.lastError else []
    return found + [f"{c.toolCallId}: {c.errorClass}" for c in state.toolCalls.values() if c.errorClass]


@dataclass(frozen=True)
class RunFilter:
    """`runs list` filters: status, stuck longer than, needs review."""

    status: str | None = None
    stuck_longer_than: timedelta | None = None
    needs_review: bool = False

    def matches(self, state: RunState, now: datetime) -> bool:
        if self.status is not None and state.status != self.status:
            return False
        if self.needs_review and state.status not in REVIEW:
            return False
        if self.stuck_longer_than is not None:
            stuck = stuck_for(state, now)
            return stuck is not None and stuck > self.stuck_longer_than
        return True


def list_rows(states: list[RunState], flt: RunFilter, now: datetime) -> list[dict[str, Any]]:
    """One row per matching run, longest stuck first."""
    rows = []
    for s in states:
        if not flt.matches(s, now):
            continue
        stuck = stuck_for(s, now)
        rows.append({"runId": s.runId, "status": s.status, "statusReason": s.statusReason,
                     "stuckSeconds": None if stuck is None else round(stuck.total_seconds(), 1),
                     "node": s.checkpoint.node if s.checkpoint else None, "version": s.version,
                     "pendingApprovals": len(s.open_approvals()),
                     "inFlight": len(s.in_flight_calls()), "lastError": s.lastError})
    return sorted(rows, key=lambda r: (-(r["stuckSeconds"] or -1), r["runId"]))


# --- dashboard user view (role-trimmed) ---------------------------------------------------

@dataclass(frozen=True)
class Viewer:
    """Who looks: subject id, roles (from the login) and, if known, the command types the policy allows."""

    subject: str
    roles: tuple[str, ...]
    allowed: frozenset[str] | None = None

    def may(self, command_type: str, fallback_roles: frozenset[str]) -> bool:
        if self.allowed is not None:
            return command_type in self.allowed
        return bool(fallback_roles & set(self.roles))

    def may_see(self, state: RunState) -> bool:
        """Staff see every run; an end user only their own."""
        return bool(STAFF_ROLES & set(self.roles)) or state.userId == self.subject

    def sees_personal(self) -> bool:
        return bool(PERSONAL_ROLES & set(self.roles))


def user_view(state: RunState, viewer: Viewer) -> dict[str, Any] | None:
    """The dashboard's View of a run for this viewer (None: not theirs to see)."""
    if not viewer.may_see(state):
        return None
    active = state.status in ACTIVE
    personal = viewer.sees_personal()
    return {
        "runId": state.runId, "version": state.version, "status": state.status,
        "statusReason": state.statusReason, "statusSince": state.statusSince.isoformat(),
        "goalSummary": state.goalSummary if personal else None,
        "isBusy": state.status in BUSY,
        "canStop": active and viewer.may("run.stop", STOP_ROLES),
        "canCancel": active and viewer.may("run.cancel", CANCEL_ROLES),
        "canRetry": [c.toolCallId for c in state.toolCalls.values() if _retryable(state, c)]
        if viewer.may("tool.call.retry", RETRY_ROLES) else [],
        "approvalBanner": _banner(state, set(viewer.roles), personal),
        "toolCalls": [{"toolCallId": c.toolCallId, "action": c.action, "execution": c.execution,
                       "verification": c.verification} for c in state.toolCalls.values()],
    }


def _banner(state: RunState, roles: set[str], personal: bool) -> dict[str, Any] | None:
    """The oldest open approval, if the run is waiting for one."""
    if state.status != "waiting_for_approval":
        return None
    pending = state.open_approvals()
    if not pending:
        return None
    a = pending[0]
    return {"approvalId": a.approvalId, "toolCallId": a.toolCallId, "risk": a.risk,
            "requiredRole": a.requiredRole, "expiresAt": a.expiresAt.isoformat(),
            "argsHash": a.argsHash, "summary": a.summary if personal else None,
            "canDecide": a.requiredRole in roles}


def _retryable(state: RunState, c: ToolCallState) -> bool:
    return (state.status == "running" and c.execution == "failed" and bool(c.retryable)
            and c.closedReason is None)
