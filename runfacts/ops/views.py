"""Views of a run for people, pure: the operator summary (CLI) and the dashboard's pages.

The operator summary is a function of `RunState` (and the clock passed in) and never carries
a field the contract marks personal (goalSummary, userId, subject ids, summaries, free-text
reasons and tool messages): an operator sees node, errors, budget and stuck time only
(SEMANTICS §12). The dashboard shows the projections' user view — one view function,
`runfacts.projections.user_view.user_view(state, role)` — read from the view topic for the
user role, computed from run state for operators and auditors; a page adds only the buttons
the policy would let the viewer press.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from runfacts.privacy.envelope import KeyView, reveal
from runfacts.processors.decider.state import TERMINAL, ApprovalState, RunState, ToolCallState
from runfacts.projections.user_view import Role, as_json, user_view

REVIEW = frozenset({"needs_review", "waiting_for_review"})
# role names as in the default policy (processors/policy/policy.toml); buttons follow the policy itself
# when the viewer carries `allowed` (policy.allowed_command_types), these sets otherwise
STOP_ROLES = frozenset({"user", "support_agent", "supervisor", "operator"})
CANCEL_ROLES = STOP_ROLES
RETRY_ROLES = frozenset({"operator"})
STAFF_ROLES = frozenset({"support_agent", "supervisor", "operator", "auditor",
                         "memory_reviewer"})  # a reviewer sees the runs (of its tenant) whose candidates it judges
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
        "settledCalls": len(state.settledCalls),
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
            "closedReason": c.closedReason, "risk": c.risk,
            "waiting": None if c.held is None else  # its capability is paused (runfacts tools pause)
            f"{c.capabilityId} paused by {c.held.pausedBy}" + (f": {c.held.reason}" if c.held.reason else "")}


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


ORPHAN_AFTER = timedelta(minutes=1)
"""A call ready for a dispatcher's claim that no dispatcher has claimed for this long is an orphan."""


def orphaned_calls(state: RunState, now: datetime, after: timedelta = ORPHAN_AFTER) -> list[str]:
    """The run's calls no dispatcher owns: authorized (or found not_found after a lost response),
    waiting for a claim longer than `after`, in a run that has not ended."""
    if state.terminal:
        return []
    return [c.toolCallId for c in state.toolCalls.values()
            if c.awaiting_claim and now - (c.claimableSince or c.proposedAt) > after]


def retries(state: RunState) -> int:
    """Attempts past the first, over the run's tool calls (settled calls compacted away are not counted)."""
    return sum(max(0, c.attempts - 1) for c in state.toolCalls.values())


def checkpoint_lag(state: RunState) -> timedelta:
    """How far the run's state has moved past its last checkpoint: the time between the
    checkpoint (the run's creation when it has none) and the state's last change."""
    since = state.checkpoint.savedAt if state.checkpoint is not None else state.createdAt
    return max(state.updatedAt - since, timedelta(0))


def list_rows(states: list[RunState], flt: RunFilter, now: datetime) -> list[dict[str, Any]]:
    """One row per matching run, longest stuck first: stuck time, retries, orphaned calls and
    checkpoint lag besides status and counts."""
    rows = []
    for s in states:
        if not flt.matches(s, now):
            continue
        stuck = stuck_for(s, now)
        rows.append({"runId": s.runId, "status": s.status, "statusReason": s.statusReason,
                     "stuckSeconds": None if stuck is None else round(stuck.total_seconds(), 1),
                     "node": s.checkpoint.node if s.checkpoint else None, "version": s.version,
                     "pendingApprovals": len(s.open_approvals()),
                     "inFlight": len(s.in_flight_calls()), "lastError": s.lastError,
                     "retries": retries(s), "orphanedCalls": orphaned_calls(s, now),
                     "checkpointLagSeconds": round(checkpoint_lag(s).total_seconds(), 1)})
    return sorted(rows, key=lambda r: (-(r["stuckSeconds"] or -1), r["runId"]))


# --- dashboard pages: the projections' user view plus what this viewer may press ---------------

@dataclass(frozen=True)
class Viewer:
    """Who looks: subject id, roles (from the login) and, if known, the command types the policy allows."""

    subject: str
    roles: tuple[str, ...]
    allowed: frozenset[str] | None = None
    tenant: str | None = None
    tenant_bound: bool = False
    """True: sees only runs of `tenant` (the policy's tenancy rule, `policy.tenant_bound`)."""

    @property
    def role(self) -> Role:
        """Which trimming of the user view this viewer gets: auditor, operator, else user."""
        if "auditor" in self.roles:
            return "auditor"
        return "operator" if "operator" in self.roles else "user"

    def may(self, command_type: str, fallback_roles: frozenset[str]) -> bool:
        if self.allowed is not None:
            return command_type in self.allowed
        return bool(fallback_roles & set(self.roles))

    def may_see(self, owner: str | None, tenant: str | None = None) -> bool:
        """Staff see every run of their tenant (cross-tenant staff: every run); an end user
        only their own (`owner`: the run's userId; `tenant`: the run's)."""
        if self.tenant_bound and tenant != self.tenant:
            return False
        return bool(STAFF_ROLES & set(self.roles)) or (owner is not None and owner == self.subject)


def view_of(state: RunState | None, role: Role) -> dict[str, Any] | None:
    """The `role` user view of a run as the view topic carries it (projections' `user_view`)."""
    view = user_view(state, role)
    return None if view is None else as_json(view)


AUDITOR_FIELDS = ("userId", "goalSummary", "createdBy", "lastError")
"""The personal fields of a view (its auditor detail), by the field they were sealed as."""
_SEALED_AS = {"createdBy": "subjectId", "lastError": "detail"}


def revealed_view(view: dict[str, Any] | None, keys: KeyView) -> dict[str, Any] | None:
    """The view with its auditor detail revealed through `runfacts.privacy.reveal` (plain values,
    or `[erased]` once the subject's keys are gone); views without the detail are unchanged."""
    if view is None or not view.get("auditor"):
        return view
    detail = {name: reveal(value, _SEALED_AS.get(name, name), keys) if name in AUDITOR_FIELDS else value
              for name, value in view["auditor"].items()}
    banner = view.get("approvalBanner")
    if banner and banner.get("summary"):  # the auditor's banner carries the approval's summary
        banner = {**banner, "summary": reveal(banner["summary"], "summary", keys)}
    return {**view, "auditor": detail, "approvalBanner": banner}


def page_view(view: dict[str, Any] | None, viewer: Viewer) -> dict[str, Any] | None:
    """A user view (the UserView schema's fields, as a dict) plus the buttons this viewer may
    press; the decider still decides every command."""
    if view is None:
        return None
    banner = view["approvalBanner"]
    return {**view,
            "canDecide": banner is not None and banner["requiredRole"] in viewer.roles,
            "canStop": view["canStop"] and viewer.may("run.stop", STOP_ROLES),
            "canCancel": view["canStop"] and viewer.may("run.cancel", CANCEL_ROLES),
            "canRetry": list(view["canRetry"]) if viewer.may("tool.call.retry", RETRY_ROLES) else []}
