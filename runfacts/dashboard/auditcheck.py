"""Does a run's audit chain verify? Pure: the stored audit records against the run's facts.

The run page shows the chain head (sequence, recordHash) and checks, link by link, that each
stored record follows the one before (its recordHash matches its own fields, sequence and
prevHash follow) and names an event that is in the log with exactly the bytes it hashed
(eventHash = SHA-256 of the event's Avro body at that offset). What the records *summarize*
(changes, keyed digests) is checked by `runfacts audit verify`, which holds the digest key.
Facts the projector has not reached yet are counted, not a failure.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from hashlib import sha256

from runfacts.projections.audit import reducer as audit

FRAMING = 10  # single-object header: C3 01 + 8-byte fingerprint


@dataclass(frozen=True)
class AuditStatus:
    records: int
    sequence: int
    head: str  # recordHash of the last record ("" before the first)
    verified: bool
    problem: str  # the first broken link, in words ("" when verified)
    unaudited: int  # facts without a record yet (the projector is behind)


def chain_status(records: Sequence[audit.AuditRecord], events: Mapping[int, bytes], events_topic: str) -> AuditStatus:
    """The chain of `records` (in log order) checked against `events` (offset -> framed event
    record of this run's partition of `events_topic`)."""
    head: audit.ChainHead | None = None
    for record in records:
        problem = _link_problem(head, record, events, events_topic)
        if problem:
            return AuditStatus(len(records), record.sequence, record.recordHash, False,
                               f"record {record.sequence}: {problem}", 0)
        head = audit.head_of(record)
    audited = {r.offset for r in records if r.topic == events_topic}
    return AuditStatus(len(records), head.sequence if head else 0, head.recordHash if head else "", True, "",
                       sum(1 for offset in events if offset not in audited))


def _link_problem(head: audit.ChainHead | None, record: audit.AuditRecord, events: Mapping[int, bytes],
                  events_topic: str) -> str:
    if audit.record_hash(record) != record.recordHash:
        return "its recordHash does not match its own fields (record altered)"
    sequence = 1 if head is None else head.sequence + 1
    if record.sequence != sequence:
        return f"sequence {record.sequence} where {sequence} was due (a record missing or reordered)"
    prev = audit.GENESIS if head is None else head.recordHash
    if record.prevHash != prev:
        return "its prevHash is not the previous record's recordHash"
    where = f"{record.topic}[{record.partition}]@{record.offset}"
    if record.topic != events_topic:
        return f"it names {where}, not an event of {events_topic}"
    value = events.get(record.offset)
    if value is None:
        return f"its event {where} is not in the log"
    if sha256(value[FRAMING:]).hexdigest() != record.eventHash:
        return f"its eventHash does not match the event at {where} (event altered)"
    return ""
