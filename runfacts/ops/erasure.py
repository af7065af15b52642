"""Erasures the log has recorded and the keys topic has not finished (shell): `runfacts erase`.

An erasure is two writes in order: the decider's `subject.erased` fact (runId
`erasure-<ref>`), then a tombstone for each of the subject's data keys in `<prefix>.keys`. A
crash between them leaves a fact whose subject still has live keys: `pending` finds those
(one pass over the events topic, reading only the `erasure-` records' envelopes, plus the
keys topic), `recorded` answers for one subject from its own partition (what `erase subject`
asks before it sends, so running it again resumes without a second fact).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from runfacts.client.follower import FollowerSettings, read_run
from runfacts.logread import ReadOptions, batches, log_range
from runfacts.privacy.store import KeyTable
from runfacts.processors.decider.commands.run import ERASURE_RUN_PREFIX, erasure_run_id
from runfacts.schemas.codec import Codec
from runfacts.settings import KafkaSettings
from runfacts.topics import TopicNames

ERASED = "subject.erased"


@dataclass(frozen=True)
class Erasure:
    """A recorded erasure: the subject's reference, the request, where the fact sits, keys left."""

    ref: str
    request: str
    offset: int
    live_keys: int = 0


def recorded(kafka: KafkaSettings, names: TopicNames, ref: str, timeout_s: float = 60.0) -> Erasure | None:
    """The `subject.erased` fact of subject `ref`, if the decider recorded one."""
    entries = read_run(kafka, FollowerSettings(names.events, names.prefix, "cli", backfill_timeout_s=timeout_s),
                       erasure_run_id(ref))
    facts = [e for e in entries if e.event_type == ERASED]
    if not facts:
        return None
    payload = facts[0].event.payload
    return Erasure(ref, payload.requestRef, facts[0].offset)  # type: ignore[attr-defined]


def recorded_all(kafka: KafkaSettings, names: TopicNames) -> dict[str, Erasure]:
    """Every `subject.erased` fact on the events topic, by subject reference (first one kept)."""
    codec, found = Codec(), dict[str, Erasure]()
    prefix = ERASURE_RUN_PREFIX.encode()
    options = ReadOptions(component="cli")
    for batch in batches(kafka, log_range(kafka, names.events, options=options), options):
        for msg in batch:
            value = msg.value()
            if value is None or not (msg.key() or b"").startswith(prefix):
                continue
            if getattr(codec.decode_envelope(value), "eventType", None) != ERASED:
                continue
            payload: Any = codec.decode(value).payload
            found.setdefault(payload.subjectRef, Erasure(payload.subjectRef, payload.requestRef, msg.offset()))
    return found


def pending(kafka: KafkaSettings, names: TopicNames, keys: KeyTable) -> list[Erasure]:
    """Recorded erasures whose subject still has live data keys in `keys` (read to its end)."""
    live: dict[str, int] = {}
    for record in keys.records.values():
        live[record.ref] = live.get(record.ref, 0) + 1
    return [Erasure(e.ref, e.request, e.offset, live[e.ref])
            for ref, e in sorted(recorded_all(kafka, names).items()) if ref in live]
