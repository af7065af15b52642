"""`evolve(state, event) -> state`: the run state as a left fold over the events log.

Pure and total: every event type has a case (`_APPLY`, checked against the contract by a
test), and an event that cannot apply to the state it meets raises `CorruptLog`.

Pure: this doorway (`evolve`, `fold`: what every event changes — version, updatedAt, the
command id kept for dedupe, evidence — around the event's own case), `run` (the cases of the
run's own facts: lifecycle, turns, checkpoint, budget, progress, memory) and `tools` (the
tool-call track: proposals and compaction, execution, verification, approvals, grants) and
`compensation` (plans, the run compensating and compensated).
"""

from __future__ import annotations

from typing import Any

from runfacts.processors.decider.commands.memory import remember_evidence
from runfacts.processors.decider.evolve.children import CHILD_APPLY
from runfacts.processors.decider.evolve.compensation import COMPENSATION_APPLY
from runfacts.processors.decider.evolve.run import RUN_APPLY, Apply, CorruptLog, add_amounts
from runfacts.processors.decider.evolve.tools import TOOL_APPLY, action_hash
from runfacts.processors.decider.state import Budget, RunState, command_digest, window_holds, window_with
from runfacts.schemas import events as ev
from runfacts.schemas.construct import trusted

__all__ = ["CorruptLog", "action_hash", "add_amounts", "evolve", "fold"]

_APPLY: dict[str, Apply] = {**RUN_APPLY, **TOOL_APPLY, **CHILD_APPLY, **COMPENSATION_APPLY}
"""Every event type but run.created (no state yet) and command.rejected (no version change)."""


def evolve(state: RunState | None, event: ev.EventBase) -> RunState | None:
    """The state after `event` (the first event of a run must be run.created)."""
    if state is None:
        return _first(event)
    return _copy(state, _changes(state, event))


def fold(state: RunState | None, events: list[ev.EventBase]) -> RunState | None:
    """Apply events in order: `evolve` one after the other, with one copy of the state for the
    whole list (the cases read a private working copy that each event's changes update in
    place; neither `state` nor anything it holds is mutated)."""
    if len(events) < 2:
        return evolve(state, events[0]) if events else state
    i = 0
    while state is None and i < len(events):
        state, i = _first(events[i]), i + 1
    if state is None or i == len(events):
        return state
    values = dict(state.__dict__)
    work = trusted(RunState, values)
    for event in events[i:]:
        values.update(_changes(work, event))
    return work


def _first(event: ev.EventBase) -> RunState | None:
    if isinstance(event, ev.CommandRejected | ev.SubjectErased | ev.VersionDrained | ev.ToolPaused | ev.ToolResumed):
        return None  # a command for no run, an erasure, a drain, a capability's pause (not runs): nothing to change
    if not isinstance(event, ev.RunCreated):
        raise CorruptLog(event, "first event of a run must be run.created")
    return _created(event)


def _changes(state: RunState, event: ev.EventBase) -> dict[str, Any]:
    """The fields `event` changes on `state`: its case's, plus version, updatedAt, evidence and
    the command id kept for dedupe."""
    if isinstance(event, ev.CommandRejected):
        return {"recentCommandDigests": _remember(state, event.payload.commandId)}
    apply = _APPLY.get(event.eventType)
    if apply is None:
        raise CorruptLog(event, "no evolve case for this event type")
    changes = apply(state, event)
    evidence = remember_evidence(state, event)
    if evidence is not None:
        changes["evidence"] = evidence
    changes.setdefault("version", state.version + 1)
    changes["updatedAt"] = event.occurredAt
    cause = event.causationId
    if cause is not None:
        recent, digest = state.recentCommandDigests, command_digest(cause)
        if not recent.endswith(digest) and not window_holds(recent, digest):
            changes["recentCommandDigests"] = window_with(recent, digest)
    return changes


def _copy(state: RunState, changes: dict[str, Any]) -> RunState:
    """state with `changes` (values built from validated events: no re-validation)."""
    return trusted(RunState, {**state.__dict__, **changes})


def _remember(state: RunState, command_id: str) -> str:
    return window_with(state.recentCommandDigests, command_digest(command_id))


def _created(e: ev.RunCreated) -> RunState:
    p = e.payload
    return RunState(
        runId=e.runId, status="created", version=1, tenant=p.tenant, createdBy=p.actor,
        userId=p.userId, goalRef=p.goalRef, goalSummary=p.goalSummary, createdAt=e.occurredAt,
        updatedAt=e.occurredAt, statusSince=e.occurredAt, versions=p.versions,
        budget=Budget(limits=p.budget),
        recentCommandDigests=command_digest(e.causationId) if e.causationId else "",
    )
