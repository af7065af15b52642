"""The console's health page, shell: consumer lag per processor and partition, read from Kafka,
and the engines' metrics records (commit latency, batch sizes) from the metrics topic (`MetricsFeed`).

Lag is the records a processor group has still to process, computed from outside: between the
group's committed offset (`Consumer.committed` under the group id, without joining the group)
and the partition's end (the high watermark, by the one topic reader's `watermarks`). Topics
written in Kafka transactions hold a commit marker after each transaction's records: a group
that processed everything has committed the offset of that marker, so the high watermark is
one (or more) past it. Those markers are no records, so where the end is past the committed
offset the records in between are counted with a read_committed reader (up to `COUNT_LIMIT`;
beyond that the offset difference, an upper bound). A group that never committed shows its
whole partition as lag. On a secured cluster the dashboard principal needs Describe on those
groups (else: the error on the page).
"""

from __future__ import annotations

import logging
import time
from collections import deque
from dataclasses import dataclass
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition

from runfacts.dashboard.feed import ViewFeed
from runfacts.logread import partition_count, watermarks
from runfacts.metrics import decode as decode_metrics
from runfacts.processors.decider.app import APP_NAME as DECIDER
from runfacts.processors.dispatcher.app import app_name as dispatcher_name
from runfacts.projections.projector.app import app_name as projector_name
from runfacts.schemas.errors import InfrastructureError
from runfacts.settings import KafkaSettings
from runfacts.topics import TopicNames

log = logging.getLogger("runfacts.dashboard")


@dataclass(frozen=True)
class Processor:
    label: str
    group: str
    topic: str


@dataclass(frozen=True)
class Lag:
    processor: str
    topic: str
    partition: int
    committed: int | None  # None: the group never committed here
    end: int
    waiting: int | None = None  # the records counted past the committed offset (None: not counted)

    @property
    def lag(self) -> int:
        if self.waiting is not None:
            return self.waiting
        return max(0, self.end - (self.committed if self.committed is not None else 0))


def processors(names: TopicNames) -> list[Processor]:
    """The processors whose groups the engine runs under, with the topic each consumes."""
    decider = DECIDER if names.prefix == "runfacts" else f"{names.prefix}-run-decider"
    return [Processor("run decider", decider, names.commands),
            Processor("dispatcher", dispatcher_name(names.prefix), names.events),
            Processor("projector", projector_name(names.prefix), names.events)]


def consumer_lag(kafka: KafkaSettings, procs: list[Processor], timeout_s: float = 10.0) -> list[Lag]:
    """Lag per processor and partition (InfrastructureError naming what failed)."""
    rows: list[Lag] = []
    for proc in procs:
        consumer = Consumer(kafka.client_config(**{"group.id": proc.group, "enable.auto.commit": False}))
        try:
            parts = [TopicPartition(proc.topic, p) for p in range(partition_count(consumer, proc.topic, timeout_s))]
            try:
                committed = consumer.committed(parts, timeout=timeout_s)
            except KafkaException as exc:
                raise InfrastructureError(f"committed offsets of group {proc.group}: {exc}", retryable=True) from exc
            for tp in committed:
                _low, high = watermarks(consumer, TopicPartition(proc.topic, tp.partition), timeout_s)
                done = tp.offset if tp.offset >= 0 else None
                waiting = None if done is None or high <= done else records_between(
                    kafka, proc.topic, tp.partition, done, high, timeout_s)
                rows.append(Lag(proc.label, proc.topic, tp.partition, done, high, waiting))
        finally:
            consumer.close()
    return rows


COUNT_LIMIT = 10_000
"""Records counted one by one past a committed offset; more than that: the offset difference."""


def records_between(kafka: KafkaSettings, topic: str, partition: int, start: int, end: int,
                    timeout_s: float = 10.0) -> int:
    """The committed records in [start, end) of one partition (transaction markers and aborted
    records are not counted); over `COUNT_LIMIT` offsets apart: end - start."""
    if end - start > COUNT_LIMIT:
        return end - start
    reader = Consumer(kafka.client_config(**{"group.id": "runfacts-dashboard-lag", "enable.auto.commit": False,
                                              "isolation.level": "read_committed", "enable.partition.eof": True}))
    count = 0
    try:
        reader.assign([TopicPartition(topic, partition, start)])
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            msg = reader.poll(0.2)
            if msg is None:
                continue
            error = msg.error()
            if error is not None:
                if error.code() == KafkaError._PARTITION_EOF:
                    return count
                raise InfrastructureError(f"counting the records of {topic}[{partition}]: {error}", retryable=True)
            if (msg.offset() or 0) >= end:
                return count
            count += 1
        raise InfrastructureError(f"counting the records of {topic}[{partition}] from {start} to {end}: no end "
                                  f"reached in {timeout_s:g} s", retryable=True)
    finally:
        reader.close()


@dataclass
class MetricsFeed(ViewFeed):
    """The engines' metrics records (`runfacts.processors.engine.metrics`), the last `keep` of
    each engine instance (key `<app>/<instance>`): the health page's commit-latency charts. A
    record that does not decode is skipped and logged."""

    keep: int = 120  # ten minutes at the default 5 s interval

    def __post_init__(self) -> None:
        super().__post_init__()
        self.samples: dict[str, deque[dict[str, Any]]] = {}

    def take(self, msg: Any) -> None:
        key, value = msg.key(), msg.value()
        if key is None or value is None:
            return
        try:
            record = decode_metrics(value)
        except ValueError as exc:
            log.warning("dashboard metrics: skipped %s[%s]@%s: %s", msg.topic(), msg.partition(), msg.offset(), exc)
            return
        with self._lock:
            self.samples.setdefault(key.decode(errors="replace"), deque(maxlen=self.keep)).append(record)
        self._notify(key.decode(errors="replace"))

    def halted(self) -> list[dict[str, Any]]:
        """The partitions halted on a stored record newer than the code, as each engine instance's
        newest record says (`halted`): app, instance, partition, why, atMs; by app, instance, partition."""
        with self._lock:
            newest = [v[-1] for v in self.samples.values() if v]
        found = [{"app": str(r["app"]), "instance": str(r["instance"]), "atMs": int(r["atMs"]),
                  "partition": int(h["partition"]), "why": str(h.get("why", ""))}
                 for r in newest for h in r.get("halted") or ()]
        return sorted(found, key=lambda h: (h["app"], h["instance"], h["partition"]))

    def by_app(self) -> dict[str, list[dict[str, Any]]]:
        """Every kept record per application, in time order (its instances merged)."""
        with self._lock:
            kept = [(k, list(v)) for k, v in self.samples.items()]
        apps: dict[str, list[dict[str, Any]]] = {}
        for _key, records in kept:
            for record in records:
                apps.setdefault(str(record["app"]), []).append(record)
        return {app: sorted(rs, key=lambda r: r["atMs"]) for app, rs in sorted(apps.items())}
