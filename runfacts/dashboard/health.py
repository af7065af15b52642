"""The console's health page, shell: consumer lag per processor and partition, read from Kafka,
and the engines' metrics records (commit latency, batch sizes) from the metrics topic (`MetricsFeed`).

Lag is what the engine's `runfacts.consumer.lag` gauge reports, computed from outside: a
partition's end (the high watermark, by the one topic reader's `watermarks`) minus the
processor group's committed offset (`Consumer.committed` under the group id, without joining
the group). A group that never committed shows its whole partition as lag. On a secured
cluster the dashboard principal needs Describe on those groups (else: the error on the page).
"""

from __future__ import annotations

import logging
from collections import deque
from dataclasses import dataclass
from typing import Any

from confluent_kafka import Consumer, KafkaException, TopicPartition

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

    @property
    def lag(self) -> int:
        return self.end - (self.committed if self.committed is not None else 0)


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
                rows.append(Lag(proc.label, proc.topic, tp.partition, tp.offset if tp.offset >= 0 else None, high))
        finally:
            consumer.close()
    return rows


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

    def by_app(self) -> dict[str, list[dict[str, Any]]]:
        """Every kept record per application, in time order (its instances merged)."""
        with self._lock:
            kept = [(k, list(v)) for k, v in self.samples.items()]
        apps: dict[str, list[dict[str, Any]]] = {}
        for _key, records in kept:
            for record in records:
                apps.setdefault(str(record["app"]), []).append(record)
        return {app: sorted(rs, key=lambda r: r["atMs"]) for app, rs in sorted(apps.items())}
