"""The dashboard's live copy of a compacted topic: a consumer thread keeping the latest value per run.

A feed reads every partition from the beginning (each dashboard instance shows all runs),
keeps the latest decoded value per run and tells subscribers (asyncio queues of the SSE
streams) which run changed. The dashboard runs three: over the user-view topic (`decode_view`:
what the user role sees, exactly as the decider published it) and over the run-state topic
(`decode_state`: operators' and auditors' views through the same `user_view` function, run
ownership, and the State commands are built from) — and a `FactsFeed` over the events topic
keeping every fact of every run (the run page's timeline and tool-call tracks). The page shows only what the log says: a
banner disappears when a new value without it arrives, never because a button was clicked.

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
from runfacts.logread import partition_count
from runfacts.ops.views import stuck_for
from runfacts.processors.decider.state import RunState
from runfacts.processors.decider.state_json import load_state
from runfacts.projections import user_view
from runfacts.schemas.codec import Codec
from runfacts.schemas.errors import InvalidInput, RecordPosition
from runfacts.schemas.models import decode_event
from runfacts.settings import KafkaSettings
from runfacts.topics import reader_group

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
    """Latest decoded value per run (a RunState or a user-view dict), kept current by a background consumer."""

    kafka: KafkaSettings
    settings: FeedSettings
    states: dict[str, Any] = field(default_factory=dict)
    ready: threading.Event = field(default_factory=threading.Event)
    error: BaseException | None = None

    def __post_init__(self) -> None:
        self._subscribers: list[_Subscriber] = []
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._gauge_at = 0.0
        self._thread = threading.Thread(target=self._run, name="runfacts-dashboard-feed", daemon=True)

    def start(self) -> ViewFeed:
        self._thread.start()
        return self

    def stop(self, timeout: float = 10.0) -> None:
        self._stopping.set()
        self._thread.join(timeout)

    def get(self, run_id: str) -> Any:
        """The run's latest value (None: no such run, or archived)."""
        return self.states.get(run_id)

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

    def apply(self, key: bytes, value: bytes | None, headers: telemetry.Headers | None = None) -> None:
        """Apply one record of the topic (a tombstone removes the run) and notify subscribers."""
        run_id = key.decode()
        tel = telemetry.current()
        if not tel.enabled:
            self._apply(run_id, value)
            return
        with tel.span("dashboard view update", parent=headers, attributes={"runfacts.run_id": run_id}) as span:
            self._apply(run_id, value)
            span.set("runfacts.version", _version(self.states.get(run_id)))
        if time.monotonic() >= self._gauge_at:  # O(runs): at most every few seconds
            tel.gauge(telemetry.STUCK_RUNS, self.stuck_count(datetime.now(UTC)))
            self._gauge_at = time.monotonic() + 5.0

    def _apply(self, run_id: str, value: bytes | None) -> None:
        if value is None:
            self.states.pop(run_id, None)
        else:
            self.states[run_id] = self.settings.decode(value)
        self._notify(run_id)

    def _notify(self, run_id: str) -> None:
        with self._lock:
            subscribers = list(self._subscribers)
        for sub in subscribers:
            if sub.run_id is None or sub.run_id == run_id:
                sub.loop.call_soon_threadsafe(_offer, sub.queue, run_id)

    def stuck_count(self, now: datetime) -> int:
        """Runs that have not ended and sat in their status longer than `stuck_after`."""
        limit = self.settings.stuck_after
        return sum(1 for s in list(self.states.values())
                   if isinstance(s, RunState) and (stuck_for(s, now) or timedelta(0)) > limit)

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
            self.apply(key, msg.value(), _pairs(msg.headers()))

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
class FactsFeed(ViewFeed):
    """Every fact of every run, from the events topic: the record bytes per run (compact), decoded
    when a page reads them, with the decoded facts of the `cache_runs` most recently read runs
    kept (a page of a long run decodes only its new facts)."""

    cache_runs: int = 64

    def __post_init__(self) -> None:
        super().__post_init__()
        self.records: dict[str, list[tuple[int, int, bytes]]] = {}
        self._decoded: OrderedDict[str, list[Entry | None]] = OrderedDict()
        self._codec = Codec()

    def take(self, msg: Any) -> None:
        key, value, offset = msg.key(), msg.value(), msg.offset()
        if key is None or value is None or offset is None:
            return
        self.add(key.decode(), offset, msg.timestamp()[1], value)

    def add(self, run_id: str, offset: int, at_ms: int, value: bytes) -> None:
        """One fact of `run_id` (its record bytes) and notify subscribers."""
        self.records.setdefault(run_id, []).append((offset, at_ms, value))
        self._notify(run_id)

    def entries(self, run_id: str) -> list[Entry]:
        """The run's facts in log order (a record that does not decode is skipped and logged)."""
        records = self.records.get(run_id, [])
        with self._lock:
            decoded = self._decoded.pop(run_id, [])
        for offset, at_ms, value in records[len(decoded):len(records)]:
            try:
                event = decode_event(self._codec, value, RecordPosition(self.settings.topic, None, offset))
            except InvalidInput as exc:
                log.warning("dashboard facts: skipped a record of %s: %s", run_id, exc)
                event = None
            decoded.append(Entry(offset, event, at_ms) if event is not None else None)
        with self._lock:
            self._decoded[run_id] = decoded
            while len(self._decoded) > self.cache_runs:
                self._decoded.popitem(last=False)
        return [e for e in decoded if e is not None]
