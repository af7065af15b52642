"""The memory view: what agents may rely on, folded from `memory.*` events of every run (pure).

`evolve(view, event)` keeps, per memoryId, a candidate's provenance (run, evidence event ids,
scope, expiry) and its review (reviewer, time); `entries(view, scope, now)` answers only
confirmed, unexpired, unrevoked entries of the scope. Expiry is judged at read time from the
fact's `expiresAt` (a clock passed in), so the view never needs a timer to stay right.
`view_of_states` builds the same view from run states (the decider's authority, which
`rf.memory(scope)` reads from the run-state topic). Not built yet: a compacted
`<prefix>.memory` topic and its projector.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime
from typing import Literal, NamedTuple

from runfacts.processors.decider.state import RunState
from runfacts.schemas.common import EventBase

__all__ = ["MemoryEntry", "MemoryView", "entries", "evolve", "view_of_states"]

Status = Literal["proposed", "confirmed", "rejected", "revoked"]


class MemoryEntry(NamedTuple):
    """One memory with its provenance."""

    memoryId: str
    runId: str
    statementRef: str
    statementHash: str
    evidence: tuple[str, ...]
    scope: tuple[str, str, str]  # (tenant, capability | topic, id)
    expiresAt: datetime
    status: Status = "proposed"
    reviewer: str | None = None
    reviewedAt: datetime | None = None


MemoryView = dict[str, MemoryEntry]
_DECIDED: dict[str, Status] = {"memory.confirmed": "confirmed", "memory.rejected": "rejected",
                               "memory.revoked": "revoked"}


def evolve(view: MemoryView, event: EventBase) -> MemoryView:
    """The view after `event` (events of other types leave it as it is)."""
    p = event.payload
    if event.eventType == "memory.proposed":
        entry = MemoryEntry(p.memoryId, event.runId, p.statementRef, p.statementHash,  # type: ignore[attr-defined]
                            tuple(p.evidence), (p.scopeTenant, p.scopeKind, p.scopeId), p.expiresAt)  # type: ignore[attr-defined]
        return {**view, entry.memoryId: entry}
    status = _DECIDED.get(event.eventType)
    old = view.get(getattr(p, "memoryId", ""))
    if status is None or old is None:
        return view
    return {**view, old.memoryId: old._replace(status=status, reviewer=p.actor.subjectId,  # type: ignore[attr-defined]
                                               reviewedAt=event.occurredAt)}


def entries(view: MemoryView, scope: tuple[str, str, str] | None, now: datetime) -> list[MemoryEntry]:
    """Confirmed, unexpired, unrevoked entries of `scope` (None: every scope), by memoryId."""
    return [e for _, e in sorted(view.items())
            if e.status == "confirmed" and now < e.expiresAt and (scope is None or e.scope == scope)]


def view_of_states(states: Iterable[RunState]) -> MemoryView:
    """The memory view of the candidates the runs' states hold (the same entries `evolve` folds)."""
    view: MemoryView = {}
    for state in states:
        for m in state.memories.values():
            view[m.memoryId] = MemoryEntry(m.memoryId, state.runId, m.statementRef, m.statementHash, m.evidence,
                                           (m.scopeTenant, m.scopeKind, m.scopeId), m.expiresAt, m.status,
                                           m.decidedBy, m.decidedAt)
    return view
