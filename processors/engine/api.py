"""The processor interface: what an application hands the engine and what its handler sees.

An application is source topics + a handler + named stores (+ an optional timer handler).
The handler is `process(record, ctx)`; `ctx` (a `Context`, the Protocol below, which the
engine's task.TaskContext implements) gives
per-partition stores, `emit`, `schedule`/`cancel` for timers, the record position,
`derive_id` and `batch` (the handler's scratch for this transaction, which an optional
`flush(ctx)` turns into outputs as the transaction commits). The engine works on bytes:
each source has pluggable deserializers, each sink pluggable serializers, so a codec plugs
in without the engine knowing it.
"""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, NamedTuple, Protocol

from runfacts.schemas.errors import ConfigError, InvalidInput, RecordPosition, RunfactsError

if TYPE_CHECKING:
    from runfacts.processors.engine.store import KeyValueStore, TypedStore

Deserializer = Callable[[bytes | None], Any]
# A value deserializer of a source with value_headers=True: (value, headers) -> value
HeadersDeserializer = Callable[[bytes | None, list[tuple[str, bytes]] | None], Any]
Serializer = Callable[[Any], bytes | None]
ProcessFn = Callable[["Record", "Context"], None]
TimerFn = Callable[["Timer", "Context"], None]
FlushFn = Callable[["Context"], None]
OnInvalid = Literal["dead_letter", "fail"]

RESERVED_PREFIX = "__"
TIMER_STORE = "__timers"
_NAME = re.compile(r"^[A-Za-z0-9._-]{1,200}$")
_ID_NAMESPACE = uuid.UUID("6f1d3c2a-4b5e-5f60-8a7b-9c0d1e2f3a4b")


def raw(data: Any) -> Any:
    """The identity (de)serializer: bytes in, bytes out."""
    return data


class Record(NamedTuple):
    """One decoded input record and where it came from; headers and timestamp are read from
    the consumed message only when asked for (most handlers never do)."""

    key: Any
    value: Any
    topic: str
    partition: int
    offset: int
    message: Any
    """The consumed message (a confluent_kafka.Message, or the test driver's equivalent)."""

    @property
    def headers(self) -> list[tuple[str, bytes | None]] | None:
        return self.message.headers()  # type: ignore[no-any-return]

    @property
    def timestamp_ms(self) -> int:
        return self.message.timestamp()[1]  # type: ignore[no-any-return]

    @property
    def position(self) -> RecordPosition:
        return RecordPosition(self.topic, self.partition, self.offset)


class Timer(NamedTuple):
    """A due timer handed to the application's `on_timer`."""

    key: bytes
    timer_id: str
    due_ms: int
    payload: bytes
    partition: int


@dataclass(frozen=True)
class Source:
    """An input topic, its deserializers and what to do with undecodable records."""

    topic: str
    key_deserializer: Deserializer = raw
    value_deserializer: Deserializer | HeadersDeserializer = raw
    on_invalid: OnInvalid = "dead_letter"
    value_headers: bool = False
    """Call value_deserializer(value, headers): a codec can then name e.g. a newer schema version."""

    def __post_init__(self) -> None:
        _check_name("source.topic", self.topic)
        if self.on_invalid not in ("dead_letter", "fail"):
            raise ConfigError(f"source[{self.topic}].on_invalid", self.on_invalid,
                              "must be 'dead_letter' or 'fail'")


@dataclass(frozen=True)
class Sink:
    """Serializers for an output topic (topics without a sink take bytes as they are)."""

    topic: str
    key_serializer: Serializer = raw
    value_serializer: Serializer = raw


@dataclass(frozen=True)
class Application:
    """Source topics + a handler + named stores: everything the engine runs."""

    name: str
    sources: tuple[Source, ...]
    process: ProcessFn
    stores: tuple[str, ...] = ()
    on_timer: TimerFn | None = None
    sinks: tuple[Sink, ...] = ()
    dead_letter_topic: str = "runfacts.dlq"
    metrics_topic: str = ""
    """Where the engine publishes its metrics record every interval (empty: nowhere)."""
    flush: FlushFn | None = None
    """Called once per partition with work as the transaction commits, before its changelog
    records: outputs and store writes it makes join the transaction (e.g. one state write per
    key per batch, kept in `ctx.batch` by the handler until then)."""
    changelogs: dict[str, str] = field(default_factory=dict, hash=False)
    """Stores whose changelog is a topic the application owns (store -> topic), e.g. the
    decider's `runs` -> `<prefix>.run.state`: a put is produced once, to that topic, with the
    headers given to `ctx.put`, and no `<app>-<store>-changelog` is written (Kafka Streams'
    source-topic changelog, `topology.optimization=all`). The topic must be compacted, kept
    forever and have the sources' partition count (checked at start-up)."""

    def __post_init__(self) -> None:
        _check_name("application.name", self.name)
        _check_name("application.dead_letter_topic", self.dead_letter_topic)
        if not self.sources:
            raise ConfigError("application.sources", self.sources, "needs at least one topic")
        topics = [s.topic for s in self.sources]
        if len(set(topics)) != len(topics):
            raise ConfigError("application.sources", topics, "a topic is listed twice")
        for store in self.stores:
            _check_name("application.stores", store)
            if store.startswith(RESERVED_PREFIX):
                raise ConfigError("application.stores", store, "names starting '__' are reserved")
        if len(set(self.stores)) != len(self.stores):
            raise ConfigError("application.stores", self.stores, "a store is listed twice")
        for store, topic in self.changelogs.items():
            if store not in self.stores:
                raise ConfigError(f"application.changelogs[{store}]", topic,
                                  f"names no store of the application (its stores: {self.stores})")
            _check_name(f"application.changelogs[{store}]", topic)
            if topic in topics or topic == self.dead_letter_topic:
                raise ConfigError(f"application.changelogs[{store}]", topic,
                                  "is a source or the dead-letter topic: give the store a topic of its own")
        if len(set(self.changelogs.values())) != len(self.changelogs):
            raise ConfigError("application.changelogs", self.changelogs, "two stores share one topic")

    @property
    def all_stores(self) -> tuple[str, ...]:
        """The application's stores plus the engine's timer index."""
        return (*self.stores, TIMER_STORE)

    def changelog_topic(self, store: str) -> str:
        """The compacted changelog topic of `store`: the topic `changelogs` names for it, else
        the engine's own `<app>-<store>-changelog`."""
        return self.changelogs.get(store) or self.default_changelog_topic(store)

    def default_changelog_topic(self, store: str) -> str:
        """The engine-owned changelog topic of `store`: `<app>-<store>-changelog`."""
        return f"{self.name}-{store}-changelog"

    def source(self, topic: str) -> Source:
        for source in self.sources:
            if source.topic == topic:
                return source
        raise ConfigError("topic", topic, f"is not a source of application {self.name}")


class Serde(NamedTuple):
    """A serializer/deserializer pair for typed store access."""

    serialize: Callable[[Any], bytes]
    deserialize: Callable[[bytes], Any]


BYTES = Serde(raw, raw)
UTF8 = Serde(lambda s: s.encode(), lambda b: b.decode())
JSON = Serde(lambda v: json.dumps(v, separators=(",", ":"), sort_keys=True).encode(), json.loads)


class ProcessingError(RunfactsError):
    """The handler raised on a record or timer: the transaction was aborted, the engine stops."""

    def __init__(self, app: str, where: str, cause: BaseException) -> None:
        self.app = app
        self.where = where
        super().__init__(f"application {app}: handler failed on {where}: "
                         f"{type(cause).__name__}: {cause}")


def derive_id(app: str, *parts: object) -> str:
    """A deterministic id (UUIDv5) from the application name and an input position."""
    name = "/".join(str(p) for p in (app, *parts))
    return str(uuid.uuid5(_ID_NAMESPACE, name))


def _check_name(setting: str, name: str) -> None:
    if not isinstance(name, str) or not _NAME.match(name):
        raise ConfigError(setting, name, "must be 1-200 characters of [A-Za-z0-9._-]")


OutHeaders = Sequence[tuple[str, bytes | None]]


class Context(Protocol):
    """What a handler sees: stores, emit, timers, the current position and deterministic ids.

    A Protocol, so handlers and their tests depend on this interface only; the engine's
    `task.TaskContext` implements it (and `testdriver` runs handlers through the same one).
    """

    partition: int
    partitions: int | None
    """The source topics' partition count (the producers' murmur2 modulus: a record keyed by
    a runId belongs on `partition_for(key, partitions)`); None when unknown (a bare Task)."""
    record: Record | None
    timer: Timer | None
    batch: dict[Any, Any]
    """The handler's scratch for this transaction: emptied when it commits or rolls back."""

    def store(self, name: str) -> KeyValueStore:
        """The partition's store `name` (bytes in, bytes out; sees this transaction's writes)."""
        ...

    def typed(self, name: str, key: Serde, value: Serde) -> TypedStore:
        """The store `name` seen through serdes."""
        ...

    def put(self, store: str, key: bytes, value: bytes, headers: OutHeaders | None = None) -> None:
        """`store(store).put(key, value)`, its changelog record carrying `headers` (what the
        readers of a shared changelog topic, `Application.changelogs`, are to see)."""
        ...

    def emit(self, topic: str, key: Any, value: Any,
             headers: OutHeaders | None = None, partition: int | None = None) -> None:
        """Send an output record in the current transaction; `partition` pins it."""
        ...

    def dead_letter(self, exc: InvalidInput) -> None:
        """Refuse the input record: it goes, unchanged, to the application's dead-letter topic."""
        ...

    def schedule(self, key: bytes, due_ms: int, timer_id: str, payload: bytes = b"") -> None:
        """Fire `on_timer` for (key, timer_id) at wall-clock due_ms (replaces an earlier one)."""
        ...

    def cancel(self, key: bytes, timer_id: str) -> bool:
        """Cancel the timer (key, timer_id); False when there was none."""
        ...

    @property
    def position(self) -> RecordPosition:
        """The input record's topic[partition]@offset (offset None inside a timer)."""
        ...

    @property
    def timestamp_ms(self) -> int:
        """The record's timestamp, or the timer's due time: the handler's only clock."""
        ...

    def derive_id(self, index: int = 0) -> str:
        """A deterministic id for output `index` of this record or timer (same on replay)."""
        ...
