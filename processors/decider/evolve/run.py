"""How the run's own facts change its state: lifecycle, turns, checkpoint, budget, progress,
memory (the `evolve` cases of the events that are about the run, not one tool call).

Each case takes the state and its event and returns the changed fields (`evolve` stamps
version, updatedAt and the command id); the shared basics (`CorruptLog`, `replace_value`) live
here. Pure.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from runfacts.processors.decider.commands.memory import apply_memory
from runfacts.processors.decider.state import ACTION_WINDOW, Checkpoint, Progress, RunState
from runfacts.schemas import events as ev
from runfacts.schemas.common import BudgetAmounts
from runfacts.schemas.construct import trusted
from runfacts.schemas.errors import RunfactsError

Apply = Callable[[RunState, Any], dict[str, Any]]
CLOSABLE = frozenset({"proposed", "authorized"})
"""Execution states of a call that never ran: a cancellation, rejection or expiry closes it."""


class CorruptLog(RunfactsError):
    """An event that cannot follow the state it meets: the log or the decider is wrong."""

    def __init__(self, event: ev.EventBase, why: str) -> None:
        super().__init__(f"run {event.runId}: event {event.eventId} ({event.eventType}): {why}")


def replace_value(value: Any, **changes: Any) -> Any:
    """A frozen state value with `changes` (from validated events), without model_copy's cost."""
    return trusted(type(value), {**value.__dict__, **changes})


def status_change(state: RunState, event: ev.EventBase, status: str, reason: str | None) -> dict[str, Any]:
    return {"status": status, "statusReason": reason, "statusSince": event.occurredAt}



def _started(s: RunState, e: ev.RunStarted) -> dict[str, Any]:
    return {**status_change(s, e, "running", None), "versions": e.payload.versions}


def _paused(s: RunState, e: ev.RunPaused) -> dict[str, Any]:
    status = "waiting_for_approval" if e.payload.reason == "waiting_for_approval" else "waiting_for_review"
    return status_change(s, e, status, e.payload.reason)


def _resumed(s: RunState, e: ev.RunResumed) -> dict[str, Any]:
    return status_change(s, e, "running", None)


def _needs_review(s: RunState, e: ev.RunNeedsReview) -> dict[str, Any]:
    path = tuple(e.payload.attemptedPath) or s.attemptedPath
    return {**status_change(s, e, "needs_review", e.payload.reason), "attemptedPath": path}


def _completed(s: RunState, e: ev.RunCompleted) -> dict[str, Any]:
    return status_change(s, e, "completed", None)


def _failed(s: RunState, e: ev.RunFailed) -> dict[str, Any]:
    return {**status_change(s, e, "failed", e.payload.errorClass), "lastError": e.payload.errorClass}


def _cancel_requested(s: RunState, e: ev.RunCancelRequested) -> dict[str, Any]:
    calls = {
        k: replace_value(c, closedReason="run_cancelled")
        if c.execution in CLOSABLE and c.closedReason is None else c
        for k, c in s.toolCalls.items()
    }
    return {**status_change(s, e, "cancelling", "cancel_requested"), "toolCalls": calls}


def _cancelled(s: RunState, e: ev.RunCancelled) -> dict[str, Any]:
    return status_change(s, e, "cancelled", None)


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


def _checkpoint(s: RunState, e: ev.CheckpointSaved) -> dict[str, Any]:
    p = e.payload
    return {"checkpoint": Checkpoint(node=p.node, stateHash=p.stateHash, versions=p.versions,
                                     savedAt=e.occurredAt)}


def _debited(s: RunState, e: ev.BudgetDebited) -> dict[str, Any]:
    used = add_amounts(s.budget.used, e.payload.amounts)
    action = e.payload.actionHash
    return {
        "budget": replace_value(s.budget, used=used),
        "actionCounts": counted(s.actionCounts, action),
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


def _checkpoints_archived(s: RunState, e: ev.CheckpointsArchived) -> dict[str, Any]:
    return {"checkpointsArchived": True}


def _memory(s: RunState, e: ev.EventBase) -> dict[str, Any]:
    memory_id = getattr(e.payload, "memoryId", "")
    if not isinstance(e, ev.MemoryProposed) and memory_id not in s.memories:
        raise CorruptLog(e, f"unknown memoryId {memory_id}")
    return apply_memory(s, e)



def counted(counts: dict[str, int], action: str) -> dict[str, int]:
    """One more use of `action`, which becomes the most recent; only the ACTION_WINDOW most
    recently used actions are counted (a loop repeats recent actions)."""
    counted = dict(counts)  # a C-level copy; the pop moves `action` to the end
    counted[action] = counted.pop(action, 0) + 1
    if len(counted) > ACTION_WINDOW:
        del counted[next(iter(counted))]
    return counted


RUN_APPLY: dict[str, Apply] = {
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
    "checkpoint.saved": _checkpoint,
    "budget.debited": _debited,
    "budget.exceeded": _nothing,
    "progress.updated": _progress,
    "feedback.recorded": _nothing,
    "checkpoint.archived": _checkpoints_archived,
    "memory.proposed": _memory,
    "memory.confirmed": _memory,
    "memory.rejected": _memory,
    "memory.revoked": _memory,
    "memory.expired": _memory,
}
"""The cases of the run's own events (run.created and command.rejected are `evolve`'s)."""
