"""Read the latest run State and user view from the compacted topics (a Kafka shell).

- `StateReader.latest(run_id)` reads only the run's partition of the compacted run-state
  topic (murmur2 of the runId, like every runfacts producer) up to its end; `scan()` reads
  every partition (for `runs list` and finding an approval's run), reporting progress;
  `scan_topic(topic)` the same for any compacted topic (the memory topic).
- `reader_consumer(...)`: the never-committing read_committed consumer every reader uses.

Used by `Runfacts` (approvals, run states) and by runfacts.ops' CLI and console clients.
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, TopicPartition

from runfacts.logread import consume_ready, partition_count, watermarks
from runfacts.partitioning import partition_for
from runfacts.processors.decider.state import RunState
from runfacts.processors.decider.state_json import load_state
from runfacts.projections import user_view
from runfacts.schemas.errors import InfrastructureError
from runfacts.settings import KafkaSettings
from runfacts.topics import TopicNames, group_prefix, reader_group

Progress = Callable[[int, int], None]
POOLED = 4
"""Consumers `latest` reads with, at most, reused between reads (more reads at once wait for one)."""


@dataclass(frozen=True)
class ReaderSettings:
    """How long reads may take, and which component reads (its groups: `<prefix>-<component>-…`)."""

    metadata_timeout_s: float = 10.0
    read_timeout_s: float = 60.0
    outcome_timeout_s: float = 30.0
    component: str = "cli"  # "dashboard" for the dashboard's command client


def reader_consumer(kafka: KafkaSettings, names: TopicNames, settings: ReaderSettings) -> Consumer:
    """A never-committing reader in a fresh group under the prefix the component's ACLs grant."""
    return Consumer(kafka.client_config(**{
        "group.id": reader_group(group_prefix(names.prefix, settings.component)), "enable.auto.commit": False,
        "enable.partition.eof": True, "isolation.level": "read_committed",
        "auto.offset.reset": "earliest", "fetch.wait.max.ms": 20}))  # short reads: answer at the end fast


class StateReader:
    """Reads the latest State of runs from the compacted run-state topic.

    `scan()` keeps what it read: the next scan reads only the records appended since (from each
    partition's position after the last one) and decodes only the runs they changed, so a
    service that asks for its approvals or open runs again and again pays for the new records,
    not for the whole topic each time (as a Kafka Streams GlobalKTable is kept up to date).
    """

    def __init__(self, kafka: KafkaSettings, names: TopicNames, settings: ReaderSettings | None = None) -> None:
        self.kafka, self.names, self.settings = kafka, names, settings or ReaderSettings()
        self._lock = threading.Lock()
        self._positions: dict[int, int] = {}  # partition -> the next offset scan() reads
        self._states: dict[str, RunState] = {}
        self.decoded_states = 0  # run states scan() decoded over this reader's life (tests, metrics)
        self.consumers_made = 0  # consumers `latest` made over this reader's life (tests, metrics)
        # `latest` borrows a consumer and gives it back: a consumer per read (its threads, its fetch
        # buffers) was a gateway's main cost, each SSE stream opened and each write reads its run's
        # state (10,000 streams: benchmarks/gateway_bench.py --streams), and its memory stayed in malloc arenas
        self._idle: queue.SimpleQueue[Consumer] = queue.SimpleQueue()
        self._slots = threading.BoundedSemaphore(POOLED)  # a burst of reads (64 request threads) made a
        # consumer each, each fetching the whole partition at once: ~250 MB kept by malloc after 200 opens

    def latest(self, run_id: str, progress: Progress | None = None) -> RunState | None:
        """The run's current State (None: no such run)."""
        raw = self._latest(self.names.state, run_id, progress)
        return None if raw is None else load_state(raw)

    def latest_raw(self, run_id: str, progress: Progress | None = None) -> bytes | None:
        """The run's current state record as stored (None: no such run): for what `load_state` refuses."""
        return self._latest(self.names.state, run_id, progress)

    def latest_view(self, run_id: str, progress: Progress | None = None) -> dict[str, Any] | None:
        """The run's current user view as the decider published it to the view topic (None: no
        such run, or archived)."""
        raw = self._latest(self.names.user_view, run_id, progress)
        return None if raw is None else user_view.schema().decode(raw)

    def _latest(self, topic: str, run_id: str, progress: Progress | None) -> bytes | None:
        """The run's latest value in `topic` (only the run's partition is read)."""
        with self._borrowed() as consumer:
            count = partition_count(consumer, topic, self.settings.metadata_timeout_s)
            part = partition_for(run_id.encode(), count)
            return self._read(consumer, topic, [part], progress, run_id.encode()).get(run_id.encode())

    @contextmanager
    def _borrowed(self) -> Iterator[Consumer]:
        """An idle consumer (or a new one; at most POOLED at once), given back unassigned after a read
        that did not fail."""
        with self._slots:
            try:
                consumer = self._idle.get_nowait()
            except queue.Empty:
                consumer = reader_consumer(self.kafka, self.names, self.settings)
                with self._lock:
                    self.consumers_made += 1
            kept = False
            try:
                yield consumer
                consumer.unassign()
                self._idle.put(consumer)
                kept = True
            finally:
                if not kept:
                    consumer.close()

    def close(self) -> None:
        """Close the idle consumers (a later read makes new ones)."""
        while True:
            try:
                self._idle.get_nowait().close()
            except queue.Empty:
                return

    def scan(self, progress: Progress | None = None) -> dict[str, RunState]:
        """Every run's current State (a new dict; the States are shared with later scans)."""
        with self._lock:
            consumer = reader_consumer(self.kafka, self.names, self.settings)
            try:
                count = partition_count(consumer, self.names.state, self.settings.metadata_timeout_s)
                marks = {p: watermarks(consumer, TopicPartition(self.names.state, p),
                                       self.settings.metadata_timeout_s) for p in range(count)}
                if any(not low <= self._positions.get(p, low) <= high for p, (low, high) in marks.items()):
                    # records never seen were deleted, or the topic was made anew: read it all again
                    self._positions, self._states = {}, {}
                starts = {p: self._positions.get(p, OFFSET_BEGINNING) for p in range(count)}
                found = self._read(consumer, self.names.state, starts, progress, None, self._positions)
            finally:
                consumer.close()
            for key, value in found.items():
                if value is None:
                    self._states.pop(key.decode(), None)
                else:
                    self._states[key.decode()] = load_state(value)
                    self.decoded_states += 1
            return dict(self._states)

    def scan_topic(self, topic: str, progress: Progress | None = None) -> dict[bytes, bytes]:
        """The latest value of every key of a compacted topic, up to its end (tombstoned keys
        left out): e.g. the memory topic."""
        consumer = reader_consumer(self.kafka, self.names, self.settings)
        try:
            count = partition_count(consumer, topic, self.settings.metadata_timeout_s)
            found = self._read(consumer, topic, list(range(count)), progress, None)
        finally:
            consumer.close()
        return {k: v for k, v in found.items() if v is not None}

    def _read(self, consumer: Consumer, topic: str, parts: list[int] | dict[int, int], progress: Progress | None,
              only: bytes | None, positions: dict[int, int] | None = None) -> dict[bytes, bytes | None]:
        """The latest value per key (of `only`) in these partitions, from their start (or the
        offsets `parts` maps them to) up to their current end; `positions` gets each partition's
        offset after the last record read."""
        timeout = self.settings.metadata_timeout_s
        starts = parts if isinstance(parts, dict) else dict.fromkeys(parts, OFFSET_BEGINNING)
        ends = {p: watermarks(consumer, TopicPartition(topic, p), timeout) for p in starts}
        first = {p: low if starts[p] == OFFSET_BEGINNING else max(starts[p], low) for p, (low, _h) in ends.items()}
        todo = {p for p, (_low, high) in ends.items() if high > first[p]}
        total, done = sum(high - first[p] for p, (_low, high) in ends.items() if p in todo), 0
        consumer.assign([TopicPartition(topic, p, first[p]) for p in todo])
        latest: dict[bytes, bytes | None] = {}
        reached = dict(first)
        deadline = time.monotonic() + self.settings.read_timeout_s
        while todo:
            if time.monotonic() > deadline:
                raise InfrastructureError(f"reading {topic} took over {self.settings.read_timeout_s}s",
                                          retryable=True)
            for msg in consume_ready(consumer, 1000, 0.05):
                if msg.error() is not None:
                    _eof_or_raise(msg, todo, topic, reached)
                    continue
                done += 1
                key, partition, offset = msg.key(), msg.partition(), msg.offset()
                if key is not None and (only is None or key == only):
                    latest[key] = msg.value()
                if partition is not None and offset is not None:
                    reached[partition] = max(reached[partition], offset + 1)
                    if offset + 1 >= ends[partition][1]:
                        todo.discard(partition)
            if progress is not None:
                progress(done, total)
        if positions is not None:
            positions.update(reached)
        return latest


def _eof_or_raise(msg: object, todo: set[int], topic: str, reached: dict[int, int]) -> None:
    err = msg.error()  # type: ignore[attr-defined]
    if err.code() == KafkaError._PARTITION_EOF:
        partition, offset = msg.partition(), msg.offset()  # type: ignore[attr-defined]
        todo.discard(partition)
        if offset is not None and offset >= 0:  # the end a read_committed reader may read to
            reached[partition] = max(reached[partition], offset)
        return
    raise InfrastructureError(f"reading {topic}: {err}", retryable=err.retriable())
