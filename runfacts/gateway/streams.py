"""Live streams that resume (shell): a run's records of one topic as Server-Sent Events.

One `TopicHub` per topic and gateway process tails every partition with one read_committed
consumer from the last stable offset and hands each record to the streams subscribed to its run,
so an open stream costs a queue, not a consumer (10,000 streams in one process:
benchmarks/gateway_bench.py). A `RunStream` subscribes first and then reads its own past (from
the beginning, or from just after the position a reconnecting client names in `Last-Event-ID`)
up to the position the hub had when it subscribed; what the hub hands it meanwhile waits, then
follows. The past is read by the hub's catch-up threads (at most `CATCH_UPS`, one consumer each,
reused), one read per partition at a time for every stream waiting on that partition: 10,000
streams opened at once (a gateway restart) cost a few reads of each partition, not 10,000. Every event's `id` is
its Kafka position `<partition>:<offset>`, so a client that reconnects with the last id it saw
resumes exactly after it: no gap, no duplicate (offsets within one partition are the log's order;
an aborted transaction's records are never read; a stream never hands an offset at or below the
last it handed).

A slow reader cannot grow memory: at most `queue_max` records wait for one stream; past that
the stream ends with a `retry:` hint (the browser's EventSource reconnects with its
`Last-Event-ID` and continues from there). A comment line every `heartbeat_s` keeps proxies
from closing an idle stream.
"""

from __future__ import annotations

import asyncio
import json
import logging
import queue
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from confluent_kafka import (
    OFFSET_BEGINNING,
    Consumer,
    IsolationLevel,
    KafkaError,
    KafkaException,
    Message,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient, OffsetSpec

from runfacts.client.output import Seen
from runfacts.client.output import decode as decode_chunk
from runfacts.gateway.problems import ProblemError
from runfacts.logread import RETRIABLE_METADATA, ReadOptions, consumer, partition_count
from runfacts.partitioning import partition_for
from runfacts.projections import user_view
from runfacts.schemas.codec import Codec
from runfacts.schemas.common import EventBase
from runfacts.settings import KafkaSettings

log = logging.getLogger("runfacts.gateway")
SMALL_FETCH = {"queued.min.messages": 1000, "fetch.max.bytes": 1 << 20, "max.partition.fetch.bytes": 1 << 20,
               "enable.partition.eof": False}
CATCH_UP_FETCH = {**SMALL_FETCH, "fetch.wait.max.ms": 10}
"""A catch-up ends when its consumer's position passes the hub's (past a trailing transaction
marker): the broker answers the fetch that moves it at once, not after its default 500 ms wait."""
Decode = Callable[[bytes | None], tuple[str, dict[str, Any]] | None]
Admit = Callable[[tuple[str, dict[str, Any]]], bool]
"""Whether a stream hands a decoded record on (called once per record, in log order, from the
run's first record on: `output_filter`)."""


@dataclass(frozen=True)
class StreamSettings:
    queue_max: int = 1_000
    """Records at most waiting for one reader; past that the stream ends with a retry hint."""
    heartbeat_s: float = 15.0
    retry_ms: int = 1_000
    """The reconnect delay the stream suggests (`retry:`)."""
    poll_s: float = 0.2


def parse_position(value: str, field: str) -> tuple[int, int]:
    """(partition, offset) of `<partition>:<offset>`; a 400 problem naming `field` otherwise."""
    part, sep, offset = value.partition(":")
    if not sep or not part.isdigit() or not offset.isdigit() or len(value) > 40:
        raise ProblemError(400, "bad-position", "Not a stream position", f"{field}={value[:60]!r}",
                           field=field, fix="send back an event's id exactly as received, e.g. '3:1042'")
    return int(part), int(offset)


def decode_event(codec: Codec) -> Decode:
    def decode(value: bytes | None) -> tuple[str, dict[str, Any]] | None:
        if value is None:
            return None
        event = codec.decode(value)
        if not isinstance(event, EventBase):
            return None
        return event.eventType, event.model_dump(mode="json")
    return decode


def decode_view(value: bytes | None) -> tuple[str, dict[str, Any]] | None:
    if value is None:
        return "view.archived", {}
    return "view", user_view.schema().decode(value)


def decode_output(value: bytes | None) -> tuple[str, dict[str, Any]] | None:
    chunk = decode_chunk(value)
    if chunk is None:
        return None
    data = {k: v for k, v in vars(chunk).items()}
    return "output", data


def output_filter() -> Admit:
    """A stream of a run's partial output hands each (stream, seq) once, in increasing seq: a chunk a
    retried writer sends again is skipped (runfacts.client.output)."""
    seen = Seen()
    return lambda decoded: seen.admit(decoded[1]["stream"], decoded[1]["seq"])


def frame(event_id: str | None, kind: str, data: Any) -> bytes:
    lines = [] if event_id is None else [f"id: {event_id}"]
    lines += [f"event: {kind}", "data: " + json.dumps(data, separators=(",", ":"), default=str)]
    return ("\n".join(lines) + "\n\n").encode()


_END = object()
ABANDONED_S = 30.0
"""A stream whose response never started reading within this long lets go of its run."""
SWEEP_S = 5.0
"""How often the hub drops streams that ended or were never read."""
CATCH_UPS = 4
"""Partitions read for streams' pasts at once, per hub (a thread and a consumer each, reused)."""
CATCH_UP_POLL_S = 0.02
"""How long a catch-up's poll waits before it checks whether its consumer passed its end."""


def _at(msg: Message) -> tuple[int, int]:
    """A consumed record's (partition, offset)."""
    partition, offset = msg.partition(), msg.offset()
    assert partition is not None and offset is not None, "a consumed record has a position"
    return partition, offset


START_TIMEOUT_S = 30.0
"""How long a hub's start retries a partition without a leader (a topic just made, an election)."""


def _stable_offsets(admin: AdminClient, parts: list[TopicPartition], timeout_s: float) -> dict[int, int]:
    """Each partition's last stable offset. A retriable error (no leader yet: a topic just made,
    a leader election) is asked again until `timeout_s`; then, or on any other error, it raises."""
    deadline = time.monotonic() + timeout_s
    while True:
        answers = admin.list_offsets({tp: OffsetSpec.latest() for tp in parts},
                                     isolation_level=IsolationLevel.READ_COMMITTED, request_timeout=10)
        try:
            return {tp.partition: answer.result().offset for tp, answer in answers.items()}
        except KafkaException as error:
            reason = error.args[0] if error.args and isinstance(error.args[0], KafkaError) else None
            retriable = reason is not None and (reason.name() in RETRIABLE_METADATA or reason.retriable())
            if not retriable or time.monotonic() >= deadline:
                raise
            time.sleep(0.2)


class TopicHub:
    """One read_committed consumer tailing every partition of a topic, handing each record to the
    streams subscribed to its run: 10,000 open streams cost one consumer, not 10,000.

    It starts at each partition's last stable offset (what a read_committed reader may read) and
    keeps `position(partition)`: every record below it was handed to the streams subscribed at
    the time, none at or above it was. A stream subscribes under the hub's lock and reads the
    part of its past below that position itself (`RunStream`), so nothing is missed or twice."""

    def __init__(self, kafka: KafkaSettings, topic: str, decode: Decode, component: str = "gateway",
                 poll_s: float = 0.2) -> None:
        self.kafka, self.topic, self.decode, self.component, self.poll_s = kafka, topic, decode, component, poll_s
        self._consumer = consumer(kafka, ReadOptions(component=component, client=SMALL_FETCH))
        self._lock = threading.Lock()
        self._subscribers: dict[bytes, set[RunStream]] = {}
        self._positions: dict[int, int] = {}
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        # the streams' catch-ups: CATCH_UPS threads, each with a consumer of its own, reused; per
        # partition, the streams waiting to read their past (and up to where) and whether one reads it
        self.catch_ups = ThreadPoolExecutor(CATCH_UPS, thread_name_prefix=f"gateway-catch-up-{topic}")
        self._readers: queue.SimpleQueue[Consumer] = queue.SimpleQueue()
        self._behind_lock = threading.Lock()
        self._behind: dict[int, list[tuple[RunStream, int]]] = {}
        self._reading: set[int] = set()
        self.reads = 0
        """Catch-up reads made (one serves every stream that waited on its partition)."""
        self.partitions = 0

    def start(self) -> None:
        """Find the partitions and their last stable offsets, then tail them (blocking)."""
        self.partitions = partition_count(self._consumer, self.topic, 10.0)
        admin = AdminClient(self.kafka.client_config())
        parts = [TopicPartition(self.topic, p) for p in range(self.partitions)]
        self._positions = _stable_offsets(admin, parts, START_TIMEOUT_S)
        self._consumer.assign([TopicPartition(self.topic, p, at) for p, at in self._positions.items()])
        self._thread = threading.Thread(target=self._tail, name=f"gateway-hub-{self.topic}", daemon=True)
        self._thread.start()

    def subscribe(self, stream: RunStream) -> int:
        """Hand `stream` its run's records from now on; the position they start at."""
        with self._lock:
            self._subscribers.setdefault(stream.key, set()).add(stream)
            return self._positions[stream.partition]

    def unsubscribe(self, stream: RunStream) -> None:
        with self._lock:
            streams = self._subscribers.get(stream.key)
            if streams is not None:
                streams.discard(stream)
                if not streams:
                    del self._subscribers[stream.key]

    @property
    def streams(self) -> int:
        with self._lock:
            return sum(len(streams) for streams in self._subscribers.values())

    def _tail(self) -> None:
        assigned = [TopicPartition(self.topic, p) for p in range(self.partitions)]
        sweep = time.monotonic() + SWEEP_S
        while not self._stop.is_set():
            try:
                first = self._consumer.poll(self.poll_s)  # returns as soon as one record is there
                batch = [] if first is None else [first, *self._consumer.consume(499, 0)]
                with self._lock:
                    for msg in batch:
                        error = msg.error()
                        if error is not None:
                            if error.code() != KafkaError._PARTITION_EOF:
                                log.warning("hub of %s: %s", self.topic, error)
                            continue
                        partition, offset = _at(msg)
                        self._positions[partition] = offset + 1
                        streams = self._subscribers.get(msg.key() or b"")
                        if streams:
                            decoded = self.decode(msg.value())
                            if decoded is not None:
                                for stream in list(streams):
                                    stream.offer(partition, offset, decoded)
                    if time.monotonic() >= sweep:
                        self._sweep()
                        sweep = time.monotonic() + SWEEP_S
                    for tp in self._consumer.position(assigned):  # past transaction markers too
                        if tp.offset >= 0:
                            self._positions[tp.partition] = max(self._positions[tp.partition], tp.offset)
            except Exception:  # noqa: BLE001 - keep tailing; the streams see no gap (positions hold)
                log.exception("hub of %s", self.topic)
                time.sleep(self.poll_s)
        self._consumer.close()

    def _sweep(self) -> None:
        """Drop ended streams and those whose response never started reading (under the lock)."""
        now = time.monotonic()
        for key, streams in list(self._subscribers.items()):
            for stream in list(streams):
                if stream.ended or (not stream.reading and now - stream.opened > ABANDONED_S):
                    streams.discard(stream)
                    stream.end()
            if not streams:
                del self._subscribers[key]

    def catch_up(self, stream: RunStream, until: int) -> None:
        """Read `stream`'s past below `until` (its partition's position when it subscribed), then
        hand it what the hub kept meanwhile: with every other stream waiting on that partition."""
        with self._behind_lock:
            self._behind.setdefault(stream.partition, []).append((stream, until))
            if stream.partition in self._reading:
                return  # the partition's reader takes it with the next read
            self._reading.add(stream.partition)
        self.catch_ups.submit(self._read_behind, stream.partition)

    def _read_behind(self, partition: int) -> None:
        """One catch-up thread: read the partition for every stream waiting on it, until none waits."""
        while True:
            with self._behind_lock:
                batch = self._behind.pop(partition, [])
                if not batch:
                    self._reading.discard(partition)
                    return
            try:
                self._read_past(partition, batch)
            except Exception as exc:  # noqa: BLE001 - the streams end with a retry hint
                log.warning("%d streams on %s[%d] stopped: %s", len(batch), self.topic, partition, exc)
                for stream, _until in batch:
                    stream.end()
            for stream, _until in batch:
                stream.caught_up()

    def _read_past(self, partition: int, batch: list[tuple[RunStream, int]]) -> None:
        """Hand each stream of `batch` its run's records in [its start, its until) of `partition`:
        one read from the lowest start to the highest until, each record decoded once."""
        waiting: dict[bytes, list[tuple[RunStream, int]]] = {}
        for stream, until in batch:
            waiting.setdefault(stream.key, []).append((stream, until))
        until = max(until for _stream, until in batch)
        start = min(stream.first for stream, _until in batch)
        self.reads += 1
        with self.reader() as reader:
            where = TopicPartition(self.topic, partition)
            if start < 0:  # OFFSET_BEGINNING: the first offset retention kept (nothing to read when it is `until`)
                start = reader.get_watermark_offsets(where, timeout=10, cached=False)[0]
            if start >= until:
                return
            reader.assign([TopicPartition(self.topic, partition, start)])
            deadline = time.monotonic() + ABANDONED_S
            while True:
                msg = reader.poll(CATCH_UP_POLL_S)
                if msg is None:
                    if reader.position([where])[0].offset >= until:
                        return  # read to the hub's position (past a trailing transaction marker)
                    if all(stream.ended for stream, _until in batch):
                        return  # every reader left
                    if time.monotonic() > deadline:
                        raise TimeoutError(f"reading {self.topic}[{partition}] up to {until}")
                    continue
                error = msg.error()
                if error is not None:
                    if error.code() == KafkaError._PARTITION_EOF:
                        continue
                    raise RuntimeError(str(error))
                _partition, offset = _at(msg)
                if offset >= until:
                    return
                deadline = time.monotonic() + ABANDONED_S
                readers = waiting.get(msg.key() or b"")
                if readers:
                    decoded = self.decode(msg.value())
                    if decoded is not None:
                        for stream, below in readers:
                            if stream.first <= offset < below:
                                stream.hand(partition, offset, decoded)

    @contextmanager
    def reader(self) -> Iterator[Consumer]:
        """A consumer for one catch-up (from the pool; at most CATCH_UPS exist)."""
        try:
            found = self._readers.get_nowait()
        except queue.Empty:
            found = consumer(self.kafka, ReadOptions(component=self.component, client=CATCH_UP_FETCH))
        try:
            yield found
        finally:
            try:
                found.unassign()
                self._readers.put(found)
            except Exception:  # noqa: BLE001 - a broken consumer is not reused
                found.close()

    def close(self) -> None:
        self._stop.set()
        self.catch_ups.shutdown(wait=False, cancel_futures=True)
        while not self._readers.empty():
            self._readers.get_nowait().close()
        if self._thread is not None:
            self._thread.join(10)
        with self._lock:
            streams = [s for subscribed in self._subscribers.values() for s in subscribed]
        for stream in streams:
            stream.end()


class RunStream:
    """One reader's stream of a run: its past read by the hub's catch-up, then the hub's records,
    through a bounded hand-over to the event loop. Slotted, with a list (not a deque: 624 bytes
    empty) for the hand-over: 10,000 of them are open at once (docs/http.md, "Sizing")."""

    __slots__ = ("_admit", "_ended", "_items", "_last", "_lock", "_loop", "_pending", "_seen", "_waiting", "_wake",
                 "first", "hub", "key", "opened", "overflowed", "partition", "reading", "run_id", "settings")

    def __init__(self, hub: TopicHub, run_id: str, settings: StreamSettings = StreamSettings(),
                 admit: Admit | None = None) -> None:
        self.hub, self.run_id, self.settings, self._admit = hub, run_id, settings, admit
        self.key = run_id.encode()
        self._items: list[Any] = []  # handed over, not yet sent (a list and one future: lighter
        self._wake: asyncio.Future[None] | None = None  # than an asyncio.Queue for 10,000 streams)
        self._waiting = 0
        self._lock = threading.Lock()
        # the hub's records while the stream reads its past (None once it has)
        self._pending: list[tuple[int, int, tuple[str, dict[str, Any]]]] | None = []
        self._last = -1  # the offset last handed over (never hand one at or below it)
        self._seen = -1  # the offset last looked at (with `admit`: from the run's first record on)
        self._ended = False
        self.overflowed = False
        self.reading = False
        self.partition = -1
        self.first = 0  # the offset its past is read from (OFFSET_BEGINNING: the first retention kept)
        self.opened = time.monotonic()

    def open(self, after: tuple[int, int] | None, field: str = "Last-Event-ID") -> None:
        """Find the run's partition and check the position a reconnecting reader names."""
        self.partition = partition_for(self.key, self.hub.partitions)
        if after is not None and after[0] != self.partition:
            raise ProblemError(400, "bad-position", "The position is not on this run's partition",
                               f"{field}={after[0]}:{after[1]}, the run's records are on partition "
                               f"{self.partition}", field=field, fix="send back an id of this run's stream")
        self._last = -1 if after is None else after[1]
        # with `admit`, the stream reads the run's records from the first (what the reader had before
        # `after` decides what it may be handed after it); else from just after `after`
        self.first = OFFSET_BEGINNING if self._admit is not None else self._last + 1
        self._seen = -1 if self._admit is not None else self._last

    def start(self, loop: asyncio.AbstractEventLoop) -> None:
        """Subscribe to the hub, then have it read the past below its position (TopicHub.catch_up)."""
        self._loop = loop
        until = self.hub.subscribe(self)
        if self.first >= until:
            self.caught_up()
            return
        self.hub.catch_up(self, until)

    def caught_up(self) -> None:
        """Its past is handed: hand what the hub kept meanwhile, then the hub's records directly."""
        with self._lock:
            pending, self._pending = self._pending or [], None
        for partition, offset, decoded in pending:
            self.hand(partition, offset, decoded)

    def offer(self, partition: int, offset: int, decoded: tuple[str, dict[str, Any]]) -> None:
        """A record of the run from the hub (its thread, under its lock)."""
        with self._lock:
            if self._pending is not None:
                if len(self._pending) >= self.settings.queue_max:
                    self._overflow()
                    return
                self._pending.append((partition, offset, decoded))
                return
        self.hand(partition, offset, decoded)

    def hand(self, partition: int, offset: int, decoded: tuple[str, dict[str, Any]]) -> None:
        with self._lock:
            if self._ended or offset <= self._seen:
                return
            self._seen = offset
            if self._admit is not None and not self._admit(decoded):
                return
            if offset <= self._last:
                return  # the reader had it (before its Last-Event-ID)
            if self._waiting >= self.settings.queue_max:
                self._overflow()
                return
            self._waiting += 1
            self._last = offset
        self._loop.call_soon_threadsafe(self._put, (f"{partition}:{offset}", *decoded))

    def _overflow(self) -> None:
        """Fell `queue_max` behind: end with a retry hint (the hub drops an ended stream)."""
        self.overflowed = True
        self._ended = True
        self._loop.call_soon_threadsafe(self._put, _END)

    @property
    def ended(self) -> bool:
        return self._ended

    def end(self) -> None:
        """End the stream (the hub stopped, or its past could not be read): a retry hint follows."""
        with self._lock:
            if self._ended:
                return
            self._ended = True
        self._loop.call_soon_threadsafe(self._put, _END)

    def _put(self, item: Any) -> None:
        """On the event loop: one item for `frames`."""
        self._items.append(item)
        if self._wake is not None and not self._wake.done():
            self._wake.set_result(None)

    async def _get(self) -> Any:
        while not self._items:
            self._wake = self._loop.create_future()
            await self._wake
        return self._items.pop(0)  # at most queue_max

    async def frames(self) -> AsyncIterator[bytes]:
        """The SSE byte frames: a retry hint first, then records; ends with a retry hint when the
        reader fell `queue_max` behind (or the broker read failed)."""
        self.reading = True
        yield f"retry: {self.settings.retry_ms}\n\n".encode()
        try:
            while True:
                try:
                    async with asyncio.timeout(self.settings.heartbeat_s):  # no task per wait (wait_for makes one)
                        item = await self._get()
                except TimeoutError:
                    yield b": keep-alive\n\n"
                    continue
                if item is _END:
                    why = "slow reader: reconnect with Last-Event-ID" if self.overflowed else "stream ended"
                    yield f": {why}\nretry: {self.settings.retry_ms}\n\n".encode()
                    return
                with self._lock:
                    self._waiting -= 1
                yield frame(*item)
        finally:
            self.close()

    def close(self) -> None:
        with self._lock:
            self._ended = True
        self.hub.unsubscribe(self)


__all__ = ["RunStream", "StreamSettings", "TopicHub", "decode_event", "decode_output", "decode_view", "frame",
           "output_filter", "parse_position"]
