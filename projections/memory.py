"""The memory view: what agents may rely on, folded from `memory.*` events of every run (pure).

`evolve(view, event)` keeps, per memoryId, a candidate's provenance (run, evidence event ids,
scope, expiry) and its review (reviewer, time); `entries(view, scope, now)` answers only
confirmed, unexpired, unrevoked entries of the scope. `view_of_states` builds the same view
from run states (the decider's authority).

The compacted topic `<prefix>.memory` holds the same entries, one record per memory (the
`MemoryEntry` projection schema, key `memory_key`): `project(old, fact)` is one event's change
to one memory for the projector (projections/projector/memory.py) and the replay alike; a
record appears at `memory.confirmed` and becomes a tombstone at `memory.revoked` or
`memory.expired` (the decider's timer writes it at `expiresAt`), so the topic is a function of
the log alone and a rebuild is byte-identical. A reader still checks `expiresAt` against its
clock (`entries`): between the expiry and the timer's fact nothing stale is answered.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from datetime import UTC, datetime, timedelta
from typing import Any, Literal, NamedTuple

from runfacts.processors.decider.state import RunState
from runfacts.projections.facts import Fact, ReadSettings
from runfacts.projections.records import ProjectionSchema, load
from runfacts.schemas.common import EventBase

__all__ = ["MEMORY_TYPES", "READS", "MemoryEntry", "MemoryView", "Record", "decode", "encode", "entries",
           "evolve", "evolve_fact", "from_store", "memory_key", "project", "schema", "to_store",
           "view_of_states"]

Status = Literal["proposed", "confirmed", "rejected", "revoked", "expired"]
MEMORY_TYPES = ("memory.proposed", "memory.confirmed", "memory.rejected", "memory.revoked", "memory.expired")
READS = ReadSettings(payloads=dict.fromkeys(MEMORY_TYPES), envelope=frozenset({"occurredAt"}))
"""What the memory projection decodes: memory.* payloads whole, of other events the envelope only."""
LIVE: frozenset[str] = frozenset({"proposed", "confirmed"})
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MS = timedelta(milliseconds=1)


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
Record = tuple[str, MemoryEntry | None]
"""One record for the memory topic: (key, entry), entry None for a tombstone."""
_DECIDED: dict[str, Status] = {"memory.confirmed": "confirmed", "memory.rejected": "rejected",
                               "memory.revoked": "revoked"}


def evolve(view: MemoryView, event: EventBase) -> MemoryView:
    """The view after `event` (events of other types leave it as it is)."""
    if event.eventType not in MEMORY_TYPES:
        return view
    p: Any = event.payload
    fields = {"memoryId": p.memoryId, "subject": p.actor.subjectId if hasattr(p, "actor") else None}
    if event.eventType == "memory.proposed":
        fields.update(statementRef=p.statementRef, statementHash=p.statementHash, evidence=tuple(p.evidence),
                      scope=(p.scopeTenant, p.scopeKind, p.scopeId), expiresAt=p.expiresAt)
    return _apply(view, event.eventType, event.runId, event.occurredAt, fields)


def evolve_fact(view: MemoryView, fact: Fact) -> MemoryView:
    """`evolve` on a projection's `Fact` (read with `READS`: timestamps as epoch ms)."""
    kind = fact.event_type
    if kind not in MEMORY_TYPES:
        return view
    p = fact.payload
    fields: dict[str, Any] = {"memoryId": p["memoryId"], "subject": (p.get("actor") or {}).get("subjectId")}
    if kind == "memory.proposed":
        fields.update(statementRef=p["statementRef"], statementHash=p["statementHash"],
                      evidence=tuple(p["evidence"]), scope=(p["scopeTenant"], p["scopeKind"], p["scopeId"]),
                      expiresAt=_at(p["expiresAt"]))
    return _apply(view, kind, fact.run_id, _at(fact.values["occurredAt"]), fields)


def _apply(view: MemoryView, kind: str, run_id: str, at: datetime, f: Mapping[str, Any]) -> MemoryView:
    if kind == "memory.proposed":
        entry = MemoryEntry(f["memoryId"], run_id, f["statementRef"], f["statementHash"], f["evidence"],
                            f["scope"], f["expiresAt"])
        return {**view, entry.memoryId: entry}
    old = view.get(f["memoryId"])
    if old is None:
        return view
    if kind == "memory.expired":  # the reviewer's decision stays on record
        return {**view, old.memoryId: old._replace(status="expired")}
    return {**view, old.memoryId: old._replace(status=_DECIDED[kind], reviewer=f["subject"], reviewedAt=at)}


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


# --- the compacted memory topic ------------------------------------------------------------

def memory_key(entry: MemoryEntry) -> str:
    """The topic key: `<tenant>|<kind>:<id>|<runId>|<memoryId>`, the scope then the entry (a
    memory id is unique within its run: the decider checks it there)."""
    tenant, kind, name = entry.scope
    return f"{tenant}|{kind}:{name}|{entry.runId}|{entry.memoryId}"


def project(old: MemoryEntry | None, fact: Fact) -> tuple[MemoryEntry | None, Record | None]:
    """One memory event's change to its memory: (what the projector keeps of it, None once it
    is over; the topic record it writes, None for none). A record is written when the memory
    becomes confirmed (the entry) and when a confirmed one stops being memory (a tombstone)."""
    memory_id = fact.payload["memoryId"]
    new = evolve_fact({} if old is None else {memory_id: old}, fact).get(memory_id)
    was = old is not None and old.status == "confirmed"
    now = new is not None and new.status == "confirmed"
    keep = new if new is not None and new.status in LIVE else None
    if now and not was:
        return keep, (memory_key(new), new)  # type: ignore[arg-type]
    if was and not now:
        return keep, (memory_key(old), None)  # type: ignore[arg-type]
    return keep, None


def schema() -> ProjectionSchema:
    """The memory topic's shipped record schema."""
    return load("MemoryEntry")


def encode(entry: MemoryEntry) -> bytes:
    """A confirmed entry's Avro body (unframed)."""
    tenant, kind, name = entry.scope
    return schema().write({
        "formatVersion": 1, "memoryId": entry.memoryId, "scopeTenant": tenant, "scopeKind": kind,
        "scopeId": name, "statementRef": entry.statementRef, "statementHash": entry.statementHash,
        "runId": entry.runId, "evidence": list(entry.evidence), "reviewer": entry.reviewer or "",
        "reviewedAt": _ms(entry.reviewedAt or _EPOCH), "expiresAt": _ms(entry.expiresAt)})


def decode(framed: bytes) -> MemoryEntry:
    """The entry of a framed memory-topic record (InvalidInput for other bytes)."""
    d = schema().decode(framed)
    return MemoryEntry(d["memoryId"], d["runId"], d["statementRef"], d["statementHash"], tuple(d["evidence"]),
                       (d["scopeTenant"], d["scopeKind"], d["scopeId"]), _at(d["expiresAt"]), "confirmed",
                       d["reviewer"], _at(d["reviewedAt"]))


def to_store(entry: MemoryEntry) -> bytes:
    """The projector's stored copy of a live candidate or memory (canonical JSON)."""
    body = {**entry._asdict(), "expiresAt": _ms(entry.expiresAt),
            "reviewedAt": None if entry.reviewedAt is None else _ms(entry.reviewedAt)}
    return json.dumps(body, sort_keys=True, separators=(",", ":")).encode()


def from_store(raw: bytes) -> MemoryEntry:
    d = json.loads(raw)
    return MemoryEntry(d["memoryId"], d["runId"], d["statementRef"], d["statementHash"], tuple(d["evidence"]),
                       tuple(d["scope"]), _at(d["expiresAt"]), d["status"], d["reviewer"],  # type: ignore[arg-type]
                       None if d["reviewedAt"] is None else _at(d["reviewedAt"]))


def _ms(at: datetime) -> int:
    return (at - _EPOCH) // _MS


def _at(ms: int) -> datetime:
    return _EPOCH + ms * _MS
