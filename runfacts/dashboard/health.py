"""The console's health page, shell: consumer lag per processor and partition, read from Kafka.

Lag is what the engine's `runfacts.consumer.lag` gauge reports, computed from outside: a
partition's end (the high watermark, by the one topic reader's `watermarks`) minus the
processor group's committed offset (`Consumer.committed` under the group id, without joining
the group). A group that never committed shows its whole partition as lag. On a secured
cluster the dashboard principal needs Describe on those groups (else: the error on the page).
"""

from __future__ import annotations

from dataclasses import dataclass

from confluent_kafka import Consumer, KafkaException, TopicPartition

from runfacts.logread import partition_count, watermarks
from runfacts.processors.decider.app import APP_NAME as DECIDER
from runfacts.processors.dispatcher.app import app_name as dispatcher_name
from runfacts.projections.projector.app import app_name as projector_name
from runfacts.schemas.errors import InfrastructureError
from runfacts.settings import KafkaSettings
from runfacts.topics import TopicNames


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
