"""The dashboard's live copy of a compacted topic: a consumer thread keeping the latest value per run.

A feed reads every partition from the beginning (each dashboard instance shows all runs),
keeps the latest decoded value per run and tells subscribers (asyncio queues of the SSE
streams) which run changed. The dashboard runs three: over the user-view topic (`decode_view`:
what the user role sees, exactly as the decider published it) and over the run-state topic
(`decode_state`: operators' and auditors' views through the same `user_view` function, run
ownership, and the State commands are built from) — and a `FactsFeed` over the events topic
(the run page's timeline and tool-call tracks). The page shows only what the log says: a
banner disappears when a new value without it arrives, never because a button was clicked.

Memory is bounded, not one decoded value per run: a feed keeps, for every run, only where its
latest record is (partition, offset) and decoded values for the `cache_runs` most recently
changed or read runs; a page that needs another run's value reads that one record back with
the one topic reader (`logread.batches`). The run-state feed (`StateFeed`) also keeps a
compact `RunRow` per run for the list, the inbox and health. `FactsFeed` keeps per run only
(partition, first and last offset, count) and the record bytes of the runs it holds (at most
`cache_runs` runs and `cache_bytes`); another run's facts are read back from its partition
between its first and last offset.

Each record applied opens a `dashboard view update` span whose parent is the trace context
the run decider put on the record, so command -> event -> view update is one trace.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, TopicPartition

from runfacts import telemetry
from runfacts.client.outcomes import Entry
from runfacts.dashboard.runlist import RunRow, row_of
from runfacts.logread import LogRange, ReadOptions, batches, partition_count
from runfacts.processors.decider.state import RunState
from runfacts.processors.decider.state_json import load_state
from runfacts.projections import user_view
from runfacts.schemas.codec import Codec
from runfacts.schemas.errors import InvalidInput, RecordPosition
from runfacts.schemas.models import decode_event
from runfacts.settings import KafkaSettings
from runfacts.topics import reader_group

NOWHERE = (-1, -1)  # a value applied without a position (tests, benchmarks): not readable back

log = logging.getLogger("runfacts.dashboard")


def decode_state(value: bytes) -> RunState:
    """A run-state record (JSON, any known version: `state_json.load_state`)."""
    return load_state(value)


def decode_view(value: bytes) -> dict[str, Any]:
    """A user-view record (framed Avro, `runfacts.projections.user_view`'s schema) as a dict."""
    return user_view.schema().decode(value)


@dataclass(frozen=True)
class FeedSettings:
    """Which topic to follow and how to decode it (`decode_state` or `decode_view`)."""

    topic: str
    decode: Callable[[bytes], Any] = decode_state
    stuck_after: timedelta = timedelta(minutes=10)
    poll_s: float = 0.1
    group_prefix: str = "runfacts-dashboard"
    """The feed reads in a fresh group `<group_prefix>-<12 hex>`: pass `<topic prefix>-dashboard`,
    the group prefix the dashboard principal's ACLs grant."""


@dataclass
class _Subscriber:
    loop: asyncio.AbstractEventLoop
    queue: asyncio.Queue[str]
    run_id: str | None = None


@dataclass
class ViewFeed:
    """Latest decoded value per run (a RunState or a user-view dict), kept current by a background
    consumer: where every run's latest record is, decoded values for the `cache_runs` most recent."""

    kafka: KafkaSettings
    settings: FeedSettings
    ready: threading.Event = field(default_factory=threading.Event)
    error: BaseException | None = None
    cache_runs: int = 1_000

    def __post_init__(self) -> None:
        self._subscribers: list[_Subscriber] = []
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._gauge_at = 0.0
        self.where: dict[str, tuple[int, int]] = {}  # run -> (partition, offset) of its latest record
        self._cache: OrderedDict[str, Any] = OrderedDict()
        self._thread = threading.Thread(target=self._run, name="runfacts-dashboard-feed", daemon=True)

    def start(self) -> ViewFeed:
        self._thread.start()
        return self

    def stop(self, timeout: float = 10.0) -> None:
        self._stopping.set()
        self._thread.join(timeout)

    def __len__(self) -> int:
        return len(self.where)

    def cached(self) -> int:
        return len(self._cache)

    def get(self, run_id: str) -> Any:
        """The run's latest value (None: no such run, or archived); read back from the topic
        when it is not among the cached ones."""
        for _ in range(3):  # a newer record may land while one is read back
            with self._lock:
                if run_id in self._cache:
                    self._cache.move_to_end(run_id)
                    return self._cache[run_id]
                at = self.where.get(run_id, NOWHERE)
            if at == NOWHERE:
                return None
            value = self._read_back(*at)
            with self._lock:
                if self.where.get(run_id) == at:
                    self._keep(run_id, value)
                    return value
        return None

    def _read_back(self, partition: int, offset: int) -> Any:
        """The record at `partition`@`offset` of the feed's topic, decoded (one topic reader)."""
        log = LogRange(self.settings.topic, {partition: offset}, {partition: offset + 1})
        options = ReadOptions(component=_component(self.settings.group_prefix, self.kafka), idle_timeout_s=10.0)
        for batch in batches(self.kafka, log, options):
            for msg in batch:
                if msg.offset() == offset and msg.value() is not None:
                    return self.settings.decode(msg.value())  # type: ignore[arg-type]
        return None

    def _keep(self, run_id: str, value: Any) -> None:
        """Cache `value` as the most recent (the lock is held)."""
        self._cache[run_id] = value
        self._cache.move_to_end(run_id)
        while len(self._cache) > self.cache_runs:
            self._cache.popitem(last=False)

    def subscribe(self, run_id: str | None = None, queue: asyncio.Queue[str] | None = None) -> asyncio.Queue[str]:
        """A queue receiving the id of each run that changes (only `run_id`'s, if given); pass
        `queue` to hear several feeds on one queue."""
        sub = _Subscriber(asyncio.get_running_loop(), queue or asyncio.Queue(maxsize=1000), run_id)
        with self._lock:
            self._subscribers.append(sub)
        return sub.queue

    def unsubscribe(self, queue: asyncio.Queue[str]) -> None:
        with self._lock:
            self._subscribers = [s for s in self._subscribers if s.queue is not queue]

    def apply(self, key: bytes, value: bytes | None, headers: telemetry.Headers | None = None,
              at: tuple[int, int] = NOWHERE) -> None:
        """Apply one record of the topic at `at` (partition, offset; a tombstone removes the run)
        and notify subscribers."""
        run_id = key.decode()
        tel = telemetry.current()
        if not tel.enabled:
            self._apply(run_id, value, at)
            return
        with tel.span("dashboard view update", parent=headers, attributes={"runfacts.run_id": run_id}) as span:
            decoded = self._apply(run_id, value, at)
            span.set("runfacts.version", _version(decoded))
        if time.monotonic() >= self._gauge_at:  # O(runs): at most every few seconds
            self.gauges(tel, datetime.now(UTC))
            self._gauge_at = time.monotonic() + 5.0

    def _apply(self, run_id: str, value: bytes | None, at: tuple[int, int]) -> Any:
        return self.put(run_id, None if value is None else self.settings.decode(value), at)

    def put(self, run_id: str, decoded: Any, at: tuple[int, int] = NOWHERE) -> Any:
        """The run's new decoded value (None: gone) as of the record at `at`; notifies."""
        with self._lock:
            if decoded is None:
                self.where.pop(run_id, None)
                self._cache.pop(run_id, None)
            else:
                self.where[run_id] = at
                self._keep(run_id, decoded)
            self._summarize(run_id, decoded)
        self._notify(run_id)
        return decoded

    def _summarize(self, run_id: str, decoded: Any) -> None:
        """Keep what a subclass needs of every run (the lock is held; None: the run is gone)."""

    def _notify(self, run_id: str) -> None:
        with self._lock:
            subscribers = list(self._subscribers)
        for sub in subscribers:
            if sub.run_id is None or sub.run_id == run_id:
                sub.loop.call_soon_threadsafe(_offer, sub.queue, run_id)

    def stuck_count(self, now: datetime) -> int:
        """Runs that have not ended and sat in their status longer than `stuck_after` (StateFeed)."""
        return 0

    def gauges(self, tel: telemetry.Telemetry, now: datetime) -> None:
        """The fleet's health gauges (StateFeed: every run it follows)."""
        tel.gauge(telemetry.STUCK_RUNS, self.stuck_count(now))

    def _run(self) -> None:
        try:
            self._follow()
        except BaseException as exc:  # surfaced by the app's health check and logs
            log.error("dashboard feed stopped: %s", exc)
            self.error = exc

    def _follow(self) -> None:
        consumer = Consumer(self.kafka.client_config(**{
            "group.id": reader_group(self.settings.group_prefix), "enable.auto.commit": False,
            "enable.partition.eof": True, "isolation.level": "read_committed", "fetch.wait.max.ms": 50}))
        try:
            topic = self.settings.topic
            count = partition_count(consumer, topic, 10.0)
            consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(count)])
            behind = set(range(count))
            while not self._stopping.is_set():
                for msg in consumer.consume(500, self.settings.poll_s):
                    err = msg.error()
                    if err is None:
                        self.take(msg)
                    elif err.code() == KafkaError._PARTITION_EOF:
                        behind.discard(msg.partition())
                    else:
                        log.warning("dashboard feed: %s", err)
                if not behind:
                    self.ready.set()
        finally:
            consumer.close()

    def take(self, msg: Any) -> None:
        """One record of the topic (an unkeyed record names no run)."""
        key = msg.key()
        if key is not None:
            self.apply(key, msg.value(), _pairs(msg.headers()), (msg.partition(), msg.offset()))

    def wait_ready(self, timeout: float = 30.0) -> bool:
        deadline = time.monotonic() + timeout
        while not self.ready.wait(0.1):
            if self.error is not None or time.monotonic() > deadline:
                return False
        return True


def _version(value: Any) -> int:
    if value is None:
        return -1
    return int(value["version"] if isinstance(value, dict) else value.version)


def _offer(queue: asyncio.Queue[str], run_id: str) -> None:
    if not queue.full():
        queue.put_nowait(run_id)


def _pairs(headers: Any) -> telemetry.Headers | None:
    """confluent-kafka's headers (a list of pairs, or None) as the telemetry Headers type."""
    return list(headers) if headers else None


@dataclass
class StateFeed(ViewFeed):
    """The run-state feed: a compact `RunRow` of every run (list, inbox, health, ownership), the
    decoded State of the `cache_runs` most recent, any other State read back on demand."""

    def __post_init__(self) -> None:
        super().__post_init__()
        self.rows: dict[str, RunRow] = {}

    def _summarize(self, run_id: str, decoded: Any) -> None:
        if isinstance(decoded, RunState):
            self.rows[run_id] = row_of(decoded)
        else:
            self.rows.pop(run_id, None)

    def all_rows(self) -> list[RunRow]:
        with self._lock:
            return list(self.rows.values())

    def stuck_count(self, now: datetime) -> int:
        limit = self.settings.stuck_after
        return sum(1 for r in self.all_rows() if (r.stuck_for(now) or timedelta(0)) > limit)

    def gauges(self, tel: telemetry.Telemetry, now: datetime) -> None:
        """Fleet-wide, over every run followed: runs stuck longer than `stuck_after` and the
        longest stuck time, tool calls no dispatcher owns (orphans), attempts past the first
        (retries) and the largest checkpoint lag of a run not ended (seconds). Policy denials by
        reason are the run decider's counter (`runfacts.policy.denials`)."""
        rows, limit = self.all_rows(), self.settings.stuck_after
        stuck = [r.stuck_for(now) or timedelta(0) for r in rows]
        tel.gauge(telemetry.STUCK_RUNS, sum(1 for x in stuck if x > limit))
        tel.gauge(telemetry.STUCK_LONGEST, max((x.total_seconds() for x in stuck), default=0.0))
        tel.gauge(telemetry.ORPHANED_CALLS, sum(r.orphans(now) for r in rows))
        tel.gauge(telemetry.RETRIED_ATTEMPTS, sum(r.retries for r in rows))
        tel.gauge(telemetry.CHECKPOINT_LAG, max((r.checkpoint_lag.total_seconds() for r in rows
                                                 if r.stuck_for(now) is not None), default=0.0))


Held = list[tuple[int, int, bytes]]  # (offset, timestamp ms, record bytes) in log order


@dataclass
class FactsFeed(ViewFeed):
    """Every run's facts from the events topic: per run where they lie (partition, first and
    last offset, count) and the record bytes of at most `cache_runs` runs and `cache_bytes`
    (the most recently changed or read), decoded when a page reads them; another run's facts
    are read back from its partition between its first and last offset."""

    cache_runs: int = 64
    cache_bytes: int = 64 * 1024 * 1024

    def __post_init__(self) -> None:
        super().__post_init__()
        self.index: dict[str, list[int]] = {}  # run -> [partition, first offset, last offset, count]
        self._held: OrderedDict[str, Held] = OrderedDict()
        self._held_bytes = 0
        self._decoded: dict[str, list[Entry | None]] = {}
        self._codec = Codec()
        self.since_checkpoint: dict[str, int] = {}  # run -> facts after its last checkpoint.saved
        self.denials: dict[str, dict[str, int]] = {}  # run -> policy denials (command.rejected) by reason

    def __len__(self) -> int:
        return len(self.index)

    def cached(self) -> int:
        return len(self._held)

    @property
    def held_bytes(self) -> int:
        return self._held_bytes

    def take(self, msg: Any) -> None:
        key, value, offset = msg.key(), msg.value(), msg.offset()
        if key is None or value is None or offset is None:
            return
        self.count(key.decode(), _event_type(msg.headers()), value)
        self.add(key.decode(), offset, msg.timestamp()[1], value, msg.partition())

    def count(self, run_id: str, event_type: str | None, value: bytes) -> None:
        """Health counts from a fact's type header (no decoding): facts past the run's last
        checkpoint; a policy denial (a `command.rejected` whose reason is a policy's: the one
        kind of fact decoded here, they are rare) by its reason code."""
        with self._lock:
            if event_type == "checkpoint.saved":
                self.since_checkpoint[run_id] = 0
            else:
                self.since_checkpoint[run_id] = self.since_checkpoint.get(run_id, 0) + 1
        if event_type != "command.rejected":
            return
        try:
            reason = getattr(decode_event(self._codec, value).payload, "reasonCode", "")
        except InvalidInput:
            return
        if reason in telemetry.POLICY_REASONS:
            with self._lock:
                counts = self.denials.setdefault(run_id, {})
                counts[reason] = counts.get(reason, 0) + 1

    def health_counts(self) -> tuple[dict[str, int], dict[str, dict[str, int]]]:
        """(facts past the last checkpoint, policy denials by reason) per run: copies."""
        with self._lock:
            return dict(self.since_checkpoint), {r: dict(c) for r, c in self.denials.items()}

    def add(self, run_id: str, offset: int, at_ms: int, value: bytes, partition: int = -1) -> None:
        """One fact of `run_id` (its record bytes) and notify subscribers; a new run's facts are
        held from its first, a run no longer held only moves its last offset."""
        with self._lock:
            where = self.index.get(run_id)
            if where is None:
                self.index[run_id] = [partition, offset, offset, 1]
                self._held[run_id] = []
            else:
                where[2], where[3] = offset, where[3] + 1
            held = self._held.get(run_id)
            if held is not None:
                held.append((offset, at_ms, value))
                self._held_bytes += len(value)
                self._held.move_to_end(run_id)
                self._evict()
        self._notify(run_id)

    def _evict(self) -> None:
        """Drop the least recent runs' bytes past the bounds, never the most recent (lock held)."""
        while len(self._held) > 1 and (len(self._held) > self.cache_runs or self._held_bytes > self.cache_bytes):
            run_id, records = self._held.popitem(last=False)
            self._held_bytes -= sum(len(v) for _o, _t, v in records)
            self._decoded.pop(run_id, None)

    def records_of(self, run_id: str) -> Held:
        """The run's records in log order: held, or read back from the topic (then held)."""
        for _ in range(3):  # a newer fact may land while the run is read back
            with self._lock:
                if run_id in self._held:
                    self._held.move_to_end(run_id)
                    return list(self._held[run_id])
                where = self.index.get(run_id)
            if where is None or where[0] < 0:
                return []
            partition, first, last, count = where
            records = self._read_range(run_id, partition, first, last)
            with self._lock:
                if self.index.get(run_id) == [partition, first, last, count] and run_id not in self._held:
                    self._held[run_id] = records
                    self._held_bytes += sum(len(v) for _o, _t, v in records)
                    self._evict()
                    return list(records)
        return []

    def _read_range(self, run_id: str, partition: int, first: int, last: int) -> Held:
        key = run_id.encode()
        log = LogRange(self.settings.topic, {partition: first}, {partition: last + 1})
        options = ReadOptions(component=_component(self.settings.group_prefix, self.kafka), idle_timeout_s=10.0)
        found: Held = []
        for batch in batches(self.kafka, log, options):
            for m in batch:
                value = m.value()
                if m.key() == key and value is not None:
                    found.append((m.offset(), int(m.timestamp()[1]), value))  # type: ignore[attr-defined]
        return found

    def entries(self, run_id: str) -> list[Entry]:
        """The run's facts in log order (a record that does not decode is skipped and logged)."""
        records = self.records_of(run_id)
        with self._lock:
            decoded = list(self._decoded.get(run_id, []))
        for offset, at_ms, value in records[len(decoded):len(records)]:
            try:
                event = decode_event(self._codec, value, RecordPosition(self.settings.topic, None, offset))
            except InvalidInput as exc:
                log.warning("dashboard facts: skipped a record of %s: %s", run_id, exc)
                event = None
            decoded.append(Entry(offset, event, at_ms) if event is not None else None)
        with self._lock:
            if run_id in self._held:
                self._decoded[run_id] = decoded
        return [e for e in decoded if e is not None]


def _event_type(headers: Any) -> str | None:
    for name, value in headers or ():
        if name == "eventType" and value is not None:
            return bytes(value).decode(errors="replace")
    return None


def _component(group_prefix: str, kafka: KafkaSettings) -> str:
    """The reading component of a feed's group prefix (`<topic prefix>-<component>`)."""
    prefix = f"{kafka.topic_prefix}-"
    return group_prefix[len(prefix):] if group_prefix.startswith(prefix) else "dashboard"
