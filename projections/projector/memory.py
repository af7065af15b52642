"""The memory projector on the engine: events topic -> the compacted memory topic, exactly once.

It hosts the pure `projections.memory.project` that `runfacts replay --projection memory` hosts,
so the live topic and a rebuild of it from the log hold byte-identical records. Per event
record (all in the engine's transaction):
1. The event's bytes become a `Fact` (`memory.READS`: memory.* payloads whole, of other events
   the envelope only); bad bytes -> the dead-letter topic. Events of other types end here.
2. Load the memory's live copy (store `memories`, key runId|memoryId: a candidate or a
   confirmed memory), `project` the event, store the new copy or delete it once the memory is over
   (rejected, revoked, expired).
3. Emit the record `project` gives, if any, to `<prefix>.memory`, key scope|run|memoryId, the
   event's partition: the framed `MemoryEntry` when a memory is confirmed, a tombstone when a
   confirmed memory is revoked or expires (`memory.expired`, the decider's timer).
The engine commits the output, the store's changelog and the input offset atomically, so each
confirmation has exactly one record and each end exactly one tombstone across crashes.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from runfacts.partitioning import misplaced_run_record
from runfacts.processors.engine.api import Application, Context, Record, Source
from runfacts.projections import memory
from runfacts.projections.eventlog import EventReader
from runfacts.projections.facts import Fact
from runfacts.schemas.errors import InvalidInput
from runfacts.topics import TopicNames

APP_NAME = "runfacts-projector-memory"  # under the projector's ACL prefix `<prefix>-projector`
STORE = "memories"


def app_name(prefix: str) -> str:
    """The engine application (and consumer group) name of the memory projector."""
    return APP_NAME if prefix == "runfacts" else f"{prefix}-projector-memory"


@dataclass
class MemoryProjectorShell:
    """The memory projector's wiring: topic names and the event reader."""

    names: TopicNames
    reader: EventReader = field(default_factory=lambda: EventReader(memory.READS))

    def __post_init__(self) -> None:
        self._prefix = memory.schema().prefix()

    def deserialize(self, data: bytes | None) -> Fact:
        """Step 1's parse (bad bytes are dead-lettered; the position comes in `process`)."""
        if data is None:
            raise InvalidInput("empty event (tombstone)", schema="runfacts.events")
        return self.reader.fact(data, "", 0, 0)

    def process(self, record: Record, ctx: Context) -> None:
        """Steps 1-3 for one event."""
        fact: Fact = record.value
        if fact.event_type not in memory.MEMORY_TYPES:
            return
        refused = misplaced_run_record(record.key, record.partition, ctx.partitions, fact.run_id,
                                       "runfacts.events")
        if refused is not None:  # another partition's run (`key_mismatch` | `wrong_partition`)
            ctx.dead_letter(refused)
            return
        fact = fact._replace(topic=record.topic, partition=record.partition, offset=record.offset)
        store = ctx.store(STORE)
        key = f"{fact.run_id}|{fact.payload['memoryId']}".encode()
        raw = store.get(key)
        keep, out = memory.project(None if raw is None else memory.from_store(raw), fact)
        if keep is None:
            if raw is not None:
                store.delete(key)
        else:
            store.put(key, memory.to_store(keep))
        if out is not None:
            topic_key, entry = out
            value = None if entry is None else self._prefix + memory.encode(entry)
            ctx.emit(self.names.memory, topic_key.encode(), value, partition=fact.partition)

    def application(self) -> Application:
        """The engine application for this shell."""
        names = self.names
        return Application(
            name=app_name(names.prefix),
            sources=(Source(names.events, value_deserializer=self.deserialize),),
            process=self.process, stores=(STORE,), dead_letter_topic=names.dlq,
        )
