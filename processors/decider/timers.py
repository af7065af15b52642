"""Which decider timers a run needs now: a pure function of its state.

The shell schedules what `wanted_timers(new)` lists and cancels what only
`wanted_timers(old)` listed; a timer that fires late or for a target that moved on is a
no-op in `decide` (TimerStale), so at-least-once firing is safe.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import NamedTuple

from runfacts.processors.decider.state import RunState, ToolCallState
from runfacts.processors.policy.capabilities import CapabilityCatalog

WALL_ACTIVE = frozenset({"created", "running", "waiting_for_approval", "waiting_for_review"})
CLAIM_WAIT = frozenset({"running", "waiting_for_approval", "compensating"})  # a dispatcher may claim (CLAIMABLE_STATUS)
TIMED = frozenset({"authorized", "result_unknown"})
"""The only executions a call timer guards: waiting for a claim (authorized, or result_unknown
reconciled not_found) and waiting for a reconciliation; every other call is skipped unread."""


class TimerSpec(NamedTuple):
    """One timer: what it guards and when it falls due."""

    kind: str  # approval_expiry | reconciliation_deadline | wall_budget | claim_deadline | memory_expiry
    target_id: str
    due: datetime


def wanted_timers(state: RunState | None, catalog: CapabilityCatalog | None = None) -> dict[str, TimerSpec]:
    """Timer id -> spec for every timer the run's state calls for (claim deadlines need the
    capability manifests: `claimWithinMs`)."""
    if state is None:
        return {}
    memories = memory_expiries(state)  # a memory outlives its run: its timer runs on an ended run too
    if state.terminal:
        return memories
    timers: dict[str, TimerSpec] = memories
    if catalog is not None and state.status in CLAIM_WAIT:
        timers.update(_claim_deadlines(state, catalog))
    for approval in state.open_approvals():
        timers[f"expiry:{approval.approvalId}"] = TimerSpec(
            "approval_expiry", approval.approvalId, approval.expiresAt)
    for call in state.toolCalls.values():
        if call.execution not in TIMED:
            continue
        grant = state.approvals.get(call.approvalId or "")
        if grant is not None and grant.status in ("granted", "consumed") and call.awaiting_claim:
            timers[f"expiry:{grant.approvalId}"] = TimerSpec(  # a grant lapses before a claim
                "approval_expiry", grant.approvalId, grant.expiresAt)
        if call.execution == "result_unknown" and call.reconcileDeadline is not None:
            timers[f"reconcile:{call.toolCallId}"] = TimerSpec(
                "reconciliation_deadline", call.toolCallId, call.reconcileDeadline)
    limit = state.budget.limits.wallTimeMs
    if limit > 0 and state.status in WALL_ACTIVE:
        timers["wall"] = TimerSpec("wall_budget", state.runId,
                                   state.createdAt + timedelta(milliseconds=limit))
    return timers


def claim_due(call: ToolCallState, catalog: CapabilityCatalog) -> datetime | None:
    """When an authorized call waiting for a claim is overdue, or None (not waiting)."""
    manifest = catalog.capabilities.get(call.capabilityId)
    if manifest is None or call.claimableSince is None or not call.awaiting_claim or call.held is not None:
        return None
    return call.claimableSince + timedelta(milliseconds=manifest.claim_within_ms)


def _claim_deadlines(state: RunState, catalog: CapabilityCatalog) -> dict[str, TimerSpec]:
    out = {}
    for call in state.toolCalls.values():
        if call.execution not in TIMED:
            continue
        due = claim_due(call, catalog)
        if due is not None:
            out[f"claim:{call.toolCallId}"] = TimerSpec("claim_deadline", call.toolCallId, due)
    return out


LIVE_MEMORY = frozenset({"proposed", "confirmed"})


def memory_expiries(state: RunState) -> dict[str, TimerSpec]:
    """One `memory_expiry` timer per candidate or memory still alive: at its `expiresAt` the
    decider writes `memory.expired`, and the memory projection drops the entry."""
    return {f"memory:{m.memoryId}": TimerSpec("memory_expiry", m.memoryId, m.expiresAt)
            for m in state.memories.values() if m.status in LIVE_MEMORY}
