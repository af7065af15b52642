"""Event bytes -> `Fact`, reading only what a projection needs (the replay's decode step).

For each writer schema the reader is compiled once (`avrocode`): the whole body for the
types a projection looks into, only the envelope for the others (payload bytes are never
parsed), nothing at all for a bytes-only projection (the audit). Old writer versions take
the codec's path (Avro schema resolution + upcasters) and are converted to the same plain
shape, so a reducer sees one shape per type whatever version wrote it.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from functools import cache
from typing import Any, NamedTuple

from runfacts.projections.facts import Fact, ReadSettings
from runfacts.schemas.binary.readers import compile_reader
from runfacts.schemas.catalog import SchemaEntry, envelope_prefix
from runfacts.schemas.codec import CONFLUENT_MAGIC, SINGLE_OBJECT_MARKER, Codec, CodecSettings
from runfacts.schemas.errors import InvalidInput, RecordPosition

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
MILLISECOND = timedelta(milliseconds=1)


class _Plan(NamedTuple):
    """How to read one writer schema: `read` None means bytes only (or the codec's path)."""

    read: Callable[[bytes, int], tuple[dict[str, Any], int]] | None
    whole: bool
    entry: SchemaEntry


_new_fact = tuple.__new__  # Fact(...) without the NamedTuple's Python-level __new__


class EventReader:
    """Turns framed event bytes into Facts, decoding only what the settings ask for."""

    def __init__(self, settings: ReadSettings | None = None, codec: Codec | None = None) -> None:
        self.settings = settings or ReadSettings()
        self.codec = codec or Codec(CodecSettings(validate=False))
        self._plans = {e.fingerprint: self._plan(e) for e in self.codec.catalog.entries
                       if e.kind == "event"}
        self._framed = {SINGLE_OBJECT_MARKER + f: p for f, p in self._plans.items()}

    def _plan(self, entry: SchemaEntry) -> _Plan:
        whole = self.settings.whole(entry.type_name)
        if not self.settings.decode:
            return _Plan(None, False, entry)
        if whole and self.codec.catalog.current[entry.fullname] is not entry:
            return _Plan(None, True, entry)  # resolution + upcast: the codec's path
        identity: dict[str, str | int] = {"eventType": entry.type_name, "schemaVersion": entry.version}
        schema = entry.raw if whole else envelope_prefix(entry.raw)
        return _Plan(compile_reader(schema, self.settings.keep(entry), expect=identity,
                                    exact=whole), whole, entry)

    def fact(self, data: bytes | None, topic: str, partition: int, offset: int) -> Fact:
        """The Fact of one framed event record; InvalidInput naming the position if bad
        (a tombstone included)."""
        if type(data) is not bytes:
            data = _as_bytes(data, RecordPosition(topic, partition, offset))
        plan = self._framed.get(data[:10])
        if plan is None:
            return self._other_framing(data, topic, partition, offset)
        read, whole, entry = plan
        if read is None:
            if not self.settings.decode:
                return _new_fact(Fact, (topic, partition, offset, None, data[10:],
                                        entry.fingerprint))
            return self._resolved(entry, data, data[10:], RecordPosition(topic, partition, offset))
        try:
            event = read(data, 10)[0]  # checks eventType, schemaVersion and the length
        except Exception as exc:  # noqa: BLE001 - any failure to parse means bad bytes
            raise InvalidInput(f"cannot read body: {type(exc).__name__}: {exc}",
                               position=RecordPosition(topic, partition, offset),
                               schema=entry.fullname, version=entry.version) from exc
        if not whole:
            event["payload"] = None
        return _new_fact(Fact, (topic, partition, offset, event, data[10:], entry.fingerprint))

    def _other_framing(self, data: bytes, topic: str, partition: int, offset: int) -> Fact:
        """Confluent framing (schema id -> entry through the codec's registry), or bad bytes."""
        position = RecordPosition(topic, partition, offset)
        ids = self.codec.schema_ids
        if data[:1] == bytes([CONFLUENT_MAGIC]) and len(data) >= 5 and ids is not None:
            entry = ids.entry_of(int.from_bytes(data[1:5], "big"))
            if entry is not None and entry.kind == "event":
                plan = self._plans[entry.fingerprint]
                reframed = SINGLE_OBJECT_MARKER + entry.fingerprint + bytes(data[5:])
                if plan.read is not None or not self.settings.decode:
                    return self.fact(reframed, topic, partition, offset)
                return self._resolved(entry, reframed, bytes(data[5:]), position)
        self.codec.decode_dict(data, position)  # raises the codec's precise InvalidInput
        raise InvalidInput("a command, not an event", position=position)

    def _resolved(self, entry: SchemaEntry, data: bytes, body: bytes,
                  position: RecordPosition) -> Fact:
        values = plain(self.codec.decode_dict(data, position))
        return Fact(position.topic or "", position.partition or 0, position.offset or 0, values,
                    body, entry.fingerprint)


def _as_bytes(data: object, position: RecordPosition) -> bytes:
    """A bytes-like value as bytes; InvalidInput naming the position for anything else."""
    if isinstance(data, bytes | bytearray | memoryview):
        return bytes(data)
    what = "empty event (tombstone)" if data is None else f"expected bytes, got {type(data).__name__}"
    raise InvalidInput(what, position=position, schema="runfacts.events")


def plain(value: Any) -> Any:
    """Codec dicts in the reducers' shape: datetimes become epoch ms, tuples lists."""
    if isinstance(value, dict):
        return {k: plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [plain(v) for v in value]
    if isinstance(value, datetime):
        return (value - EPOCH) // MILLISECOND
    return value


@cache
def default_reader() -> EventReader:
    """A process-wide reader of every payload (compiled once)."""
    return EventReader()


def fact_of(model: Any, position: RecordPosition | None = None) -> Fact:
    """The Fact of an event model as the log would hold it (tests, in-memory hosts)."""
    reader = default_reader()
    pos = position or RecordPosition("events", 0, 0)
    return reader.fact(reader.codec.encode(model), pos.topic or "events", pos.partition or 0,
                       pos.offset or 0)
