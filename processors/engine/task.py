"""One partition's unit of work, shared by the Kafka engine and the broker-free test driver.

A `Task` owns the partition's `PartitionState` (write buffers over the backend), its timer
index and the `TaskContext` (the engine's `api.Context`) its handler sees. It knows nothing
about Kafka: records arrive as objects with the `confluent_kafka.Message` accessors, and
outputs leave through an `Output` (the engine's wraps the transactional producer, the driver's is a list).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from itertools import islice
from typing import Any, Protocol

from runfacts.processors.engine.api import (
    Application,
    OutHeaders,
    ProcessingError,
    Record,
    Serde,
    Source,
    Timer,
    derive_id,
    raw,
)
from runfacts.processors.engine.store import Backend, KeyValueStore, PartitionState, TypedStore
from runfacts.processors.engine.timers import Timers
from runfacts.schemas.errors import ConfigError, InvalidInput, RecordPosition

log = logging.getLogger("runfacts.engine")
DeliveryCallback = Callable[[Any, Any], None]
"""Headers of an output record (a value may be None: a consumed record's headers pass on as is)."""
_new = tuple.__new__  # builds a Record without NamedTuple's Python-level __new__


def _unless_raw(deserializer: Callable[..., Any]) -> Callable[..., Any] | None:
    """None for `raw`; else the deserializer (its arity follows the source's value_headers)."""
    return None if deserializer is raw else deserializer


class Output(Protocol):
    """Where emitted records go: `produce` has `confluent_kafka.Producer.produce`'s shape
    (positional order included) and may raise BufferError when its queue is full; `backoff`
    then waits for room."""

    def produce(self, topic: str, value: bytes | None = None, key: bytes | None = None,
                partition: int = -1, on_delivery: DeliveryCallback | None = None,
                timestamp: int = 0, headers: OutHeaders | None = None) -> None: ...

    def backoff(self) -> None: ...


def send(out: Output, topic: str, value: bytes | None, key: bytes | None, **kw: Any) -> None:
    """Produce, waiting for queue room as long as it takes."""
    while True:
        try:
            out.produce(topic, value, key, **kw)
            return
        except BufferError:
            out.backoff()


class TaskContext:
    """The engine's `api.Context`: what a handler sees, bound to one partition's task."""

    __slots__ = ("_task", "_out", "_produce", "_sinks", "_app", "partition", "partitions", "record", "timer",
                 "batch")

    def __init__(self, task: Task, out: Output) -> None:
        self._task = task
        self._out = out
        self._produce = out.produce
        self._app = task.app
        self._sinks = {s.topic: s for s in task.app.sinks}
        self.partition = task.partition
        self.partitions = task.partitions
        self.record: Record | None = None
        self.timer: Timer | None = None
        self.batch: dict[Any, Any] = {}
        """The handler's scratch for this transaction: emptied when it commits or rolls back."""

    def store(self, name: str) -> KeyValueStore:
        """The partition's store `name` (bytes in, bytes out; sees this transaction's writes)."""
        try:
            return self._task.state.stores[name]
        except KeyError:
            raise ConfigError("store", name,
                              f"not declared by application {self._app.name}") from None

    def typed(self, name: str, key: Serde, value: Serde) -> TypedStore:
        """The store `name` seen through serdes."""
        return TypedStore(self.store(name), key, value)

    def put(self, store: str, key: bytes, value: bytes, headers: OutHeaders | None = None) -> None:
        """`store(store).put(key, value)`, its changelog record carrying `headers` (the last
        put of the key in the transaction gives them; a delete's tombstone carries none)."""
        self.store(store).put(key, value)
        if headers is not None:
            self._task.headers.setdefault(store, {})[key] = headers
        else:
            self._task.headers.get(store, {}).pop(key, None)

    def emit(self, topic: str, key: Any, value: Any,
             headers: OutHeaders | None = None, partition: int | None = None) -> None:
        """Send an output record in the current transaction (serialized by the topic's Sink);
        `partition` pins it (default: the producer's murmur2 of the key)."""
        if self._sinks and (sink := self._sinks.get(topic)) is not None:
            key, value = sink.key_serializer(key), sink.value_serializer(value)
        self._task.emitted = True
        try:
            if partition is not None:
                self._produce(topic, value, key, headers=headers, partition=partition)
            elif headers is None:
                self._produce(topic, value, key)
            else:
                self._produce(topic, value, key, headers=headers)
        except BufferError:
            pinned = {} if partition is None else {"partition": partition}
            send(self._out, topic, value, key, headers=headers, **pinned)

    def dead_letter(self, exc: InvalidInput) -> None:
        """Refuse the input record from inside the handler: it goes, unchanged, to the
        application's dead-letter topic, as records that cannot be deserialized do (the error
        is located at the record's position)."""
        record = self.record
        if record is None:
            raise RuntimeError(f"dead_letter({exc}) outside process: a timer has no input record")
        self._task.dead_letter(record.message, exc.at(record.position))

    def schedule(self, key: bytes, due_ms: int, timer_id: str, payload: bytes = b"") -> None:
        """Fire `on_timer` for (key, timer_id) at wall-clock due_ms (replaces an earlier one)."""
        if self._app.on_timer is None:
            raise ConfigError("application.on_timer", None,
                              f"{self._app.name} schedules timer {timer_id!r} but has no on_timer")
        self._task.timers.schedule(key, due_ms, timer_id, payload)

    def cancel(self, key: bytes, timer_id: str) -> bool:
        """Cancel the timer (key, timer_id); False when there was none."""
        return self._task.timers.cancel(key, timer_id)

    @property
    def position(self) -> RecordPosition:
        """The input record's topic[partition]@offset (offset None inside a timer)."""
        if self.record is not None:
            return self.record.position
        return RecordPosition(None, self.partition, None)

    @property
    def timestamp_ms(self) -> int:
        """The record's timestamp, or the timer's due time: the handler's only clock."""
        if self.record is not None:
            return self.record.timestamp_ms
        return self.timer.due_ms if self.timer is not None else 0

    def derive_id(self, index: int = 0) -> str:
        """A deterministic id for output `index` of this record or timer (same on replay)."""
        rec = self.record
        if rec is not None:
            return derive_id(self._app.name, rec.topic, rec.partition, rec.offset, index)
        t = self.timer
        if t is None:
            raise RuntimeError("derive_id called outside process/on_timer")
        return derive_id(self._app.name, "timer", t.partition, t.key.hex(), t.timer_id,
                         t.due_ms, index)


class Task:
    """One partition: state, timers, context, and the per-record and commit-side steps."""

    def __init__(self, app: Application, partition: int, backend: Backend, out: Output,
                 cache_keys: int = 10_000, cache_kb: int = 4_096, partitions: int | None = None) -> None:
        self.app = app
        self.partition = partition
        self.partitions = partitions  # the sources' partition count (None: unknown)
        self.backend = backend
        self.state = PartitionState(backend, app.all_stores, cache_keys, cache_kb)
        self.timers = Timers(self.state)
        self.ctx = TaskContext(self, out)
        self.out = out
        self.pending: dict[str, int] = {}
        self.first: dict[str, int] = {}
        self.delivered: dict[str, int] = {}
        self.delivery_errors: list[str] = []
        self.headers: dict[str, dict[bytes, OutHeaders]] = {}
        """Changelog headers of this transaction's puts (`TaskContext.put`), by store and key."""
        self.emitted = False
        """This transaction sent an output record (an emit or a dead letter) from this partition."""
        self._process = app.process
        self._with_headers = {s.topic for s in app.sources if s.value_headers}
        self._single_source = app.sources[0].topic if len(app.sources) == 1 else None
        self._deserializers = {s.topic: (_unless_raw(s.key_deserializer),
                                         _unless_raw(s.value_deserializer)) for s in app.sources}
        self._changelogs = {s: app.changelog_topic(s) for s in app.all_stores}


    def rebind(self, out: Output) -> None:
        """Send through `out` from now on (the engine's new producer, after a rollback: the
        handler's batch is empty then)."""
        self.out = out
        self.ctx = TaskContext(self, out)
    def process(self, msg: Any) -> None:
        """Deserialize one message and run the handler on it."""
        topic = msg.topic()
        self.first.setdefault(topic, msg.offset())
        self._run(topic, (msg,))
        self.pending[topic] = msg.offset()

    def process_batch(self, msgs: list[Any]) -> None:
        """Step 3 of the loop for consecutive messages of this partition (the hot path)."""
        topic = self._single_source
        if topic is None:
            for msg in msgs:
                self.process(msg)
            return
        self.first.setdefault(topic, msgs[0].offset())  # before the handler: rollback seeks here
        self._run(topic, msgs)
        self.pending[topic] = msgs[-1].offset()

    def _run(self, topic: str, msgs: Iterable[Any]) -> None:
        """Deserialize and handle messages of `topic`; the offsets are the caller's."""
        key_de, value_de = self._deserializers[topic]
        with_headers = topic in self._with_headers
        ctx, process, partition = self.ctx, self._process, self.partition
        for msg in msgs:
            try:
                key = msg.key() if key_de is None else key_de(msg.key())
                if value_de is None:
                    value = msg.value()
                elif with_headers:
                    value = value_de(msg.value(), msg.headers())
                else:
                    value = value_de(msg.value())
            except InvalidInput as exc:
                self._invalid(self.app.source(topic), msg,
                              exc.at(RecordPosition(topic, partition, msg.offset())))
                continue
            ctx.record = record = _new(Record, (key, value, topic, partition, msg.offset(), msg))
            try:
                process(record, ctx)
            except Exception as exc:
                raise ProcessingError(self.app.name, str(record.position), exc) from exc

    def _invalid(self, source: Source, msg: Any, exc: InvalidInput) -> None:
        if source.on_invalid == "fail":
            raise exc
        self.dead_letter(msg, exc)

    def dead_letter(self, msg: Any, exc: InvalidInput) -> None:
        """The consumed message, as it was, to the dead-letter topic with its headers plus the
        error's (`dlq.*`) and the app's name; in the current transaction like any output."""
        log.warning("dead-lettering %s to %s", exc, self.app.dead_letter_topic)
        headers = list(msg.headers() or []) + exc.headers() + [("dlq.app", self.app.name.encode())]
        self.emitted = True
        send(self.out, self.app.dead_letter_topic, msg.value(), msg.key(), headers=headers)

    def fire_timers(self, now_ms: int, limit: int) -> int:
        """Run `on_timer` for up to `limit` timers due at now_ms; returns how many fired."""
        fired = self.timers.pop_due(now_ms, limit)
        ctx = self.ctx
        ctx.record = None
        on_timer = self.app.on_timer
        for key, timer_id, due_ms, payload in fired:
            ctx.timer = timer = Timer(key, timer_id, due_ms, payload, self.partition)
            try:
                on_timer(timer, ctx)  # type: ignore[misc]
            except Exception as exc:
                where = f"timer {timer_id!r} of key {key!r} due {due_ms} on {self.partition}"
                raise ProcessingError(self.app.name, where, exc) from exc
        ctx.timer = None
        return len(fired)

    def has_work(self) -> bool:
        """True when this transaction touched the partition (records, state, timers or batch)."""
        return bool(self.pending) or self.state.dirty() or bool(self.ctx.batch)

    def flush(self) -> None:
        """The application's `flush` (its batched outputs and store writes join the transaction)."""
        flush = self.app.flush
        if flush is None:
            return
        try:
            flush(self.ctx)
        except Exception as exc:
            raise ProcessingError(self.app.name, f"flush of partition {self.partition}", exc) from exc

    def produce_changelog(self) -> int:
        """Commit step 1: flush, then a changelog record per buffered key (the last reports its
        offset); a put given headers (`TaskContext.put`, a shared changelog topic's) carries them."""
        self.flush()
        count, out, partition = 0, self.out, self.partition
        produce = out.produce
        for store, buffer in self.state.buffers.items():
            if not buffer:
                continue
            topic, headers = self._changelogs[store], self.headers.get(store, {})
            items = iter(buffer.items())
            for key, value in islice(items, len(buffer) - 1):
                found = headers.get(key) if value is not None else None
                if found is not None:
                    send(out, topic, value, key, partition=partition, headers=found)
                    continue
                try:
                    produce(topic, value, key, partition)
                except BufferError:
                    send(out, topic, value, key, partition=partition)
            key, value = next(items)
            found = headers.get(key) if value is not None else None
            send(out, topic, value, key, partition=partition, on_delivery=self._on_delivery(store),
                 **({"headers": found} if found is not None else {}))
            count += len(buffer)
        return count

    def _on_delivery(self, store: str) -> DeliveryCallback:
        def done(err: Any, msg: Any) -> None:
            if err is None:
                self.delivered[store] = msg.offset()
            else:
                self.delivery_errors.append(f"changelog of {store}[{self.partition}]: {err}")
        return done

    def missing_deliveries(self) -> list[str]:
        """Stores whose changelog records were not (successfully) delivered."""
        missing = [s for s, b in self.state.buffers.items() if b and s not in self.delivered]
        return self.delivery_errors + [f"no delivery report for changelog of {s}" for s in missing]

    def offsets_to_commit(self) -> dict[str, int]:
        """Next offset to consume per source topic (what the group commits)."""
        return {topic: offset + 1 for topic, offset in self.pending.items()}

    def write(self) -> None:
        """Commit step 'store write': buffers + input offsets + changelog offsets, atomically."""
        self.state.write(dict(self.pending), dict(self.delivered))
        self._reset()

    def rollback(self) -> dict[str, int]:
        """Discard this transaction's writes; returns the offset to rewind to per source topic."""
        rewind = dict(self.first)
        self.state.discard()
        self.timers.forget()
        self._reset()
        return rewind

    def quiet(self) -> bool:
        """Nothing of this transaction is for a reader yet: no output sent, and nothing in the
        handler's batch (which its `flush` turns into outputs at the commit)."""
        return not self.emitted and not self.ctx.batch

    def _reset(self) -> None:
        self.emitted = False
        self.ctx.batch.clear()
        self.pending.clear()
        self.first.clear()
        self.delivered.clear()
        self.delivery_errors.clear()
        self.headers.clear()

    def close(self) -> None:
        self.backend.close()
