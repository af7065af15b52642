"""Which decider timers a run needs now: a pure function of its state.

The shell schedules what `wanted_timers(new)` lists and cancels what only
`wanted_timers(old)` listed; a timer that fires late or for a target that moved on is a
no-op in `decide` (TimerStale), so at-least-once firing is safe.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import NamedTuple

from runfacts.processors.decider.state import RunState

WALL_ACTIVE = frozenset({"created", "running", "waiting_for_approval", "waiting_for_review"})


class TimerSpec(NamedTuple):
    """One timer: what it guards and when it falls due."""

    kind: str  # approval_expiry | reconciliation_deadline | wall_budget
    target_id: str
    due: datetime


def wanted_timers(state: RunState | None) -> dict[str, TimerSpec]:
    """Timer id -> spec for every timer the run's state calls for."""
    if state is None or state.terminal:
        return {}
    timers: dict[str, TimerSpec] = {}
    for approval in state.open_approvals():
        timers[f"expiry:{approval.approvalId}"] = TimerSpec(
            "approval_expiry", approval.approvalId, approval.expiresAt)
    for call in state.toolCalls.values():
        if call.execution == "result_unknown" and call.reconcileDeadline is not None:
            timers[f"reconcile:{call.toolCallId}"] = TimerSpec(
                "reconciliation_deadline", call.toolCallId, call.reconcileDeadline)
    limit = state.budget.limits.wallTimeMs
    if limit > 0 and state.status in WALL_ACTIVE:
        timers["wall"] = TimerSpec("wall_budget", state.runId,
                                   state.createdAt + timedelta(milliseconds=limit))
    return timers
