"""Kafka plumbing of the crash matrix: topics, producing inputs, snapshots, a broker of its own.

`snapshot` reads topics up to the end a read_committed consumer sees now (the last stable
offset: an open transaction of a killed worker hides what follows it until it is aborted),
each partition in offset order. `OwnBroker` runs a second single-node broker through
scripts/kafka.sh on other ports and its own data directory, so a row can stop and restart
a broker without touching the shared one.
"""

from __future__ import annotations

import os
import subprocess
import time
import uuid
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from confluent_kafka import Consumer, Producer, TopicPartition

from runfacts.crash_workload import Input
from runfacts.devenv import REPO
from runfacts.schemas.errors import InfrastructureError
from runfacts.settings import KafkaSettings
from runfacts.topics import TopicNames, apply_topics, runfacts_topics


@dataclass(frozen=True)
class LogRecord:
    """One record as read back: where it sits, what it holds, when the broker stamped it."""

    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes], ...]
    timestamp_ms: int


def provision(bootstrap: str, names: TopicNames, partitions: int) -> None:
    """Create the runfacts topics under `names` (changelogs: the engine creates its own)."""
    apply_topics(KafkaSettings(bootstrap_servers=bootstrap), runfacts_topics(names, partitions))


def produce(bootstrap: str, topic: str, inputs: Iterable[Input]) -> int:
    """Produce inputs in order (idempotent producer: no duplicates from retries); returns the count."""
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "linger.ms": 5})
    count = 0
    for item in inputs:
        producer.produce(topic, item.value, item.key, headers=list(item.headers) or None)
        count += 1
    left = producer.flush(30)
    if left:
        raise InfrastructureError(f"{left} inputs to {topic} not delivered in 30 s", retryable=True)
    return count


def snapshot(bootstrap: str, topics: Iterable[str], timeout_s: float = 20.0) -> dict[str, list[LogRecord]]:
    """Every committed record of `topics` up to their current end, per partition in offset order."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"crash-oracle-{uuid.uuid4().hex[:8]}",
                         "enable.auto.commit": False, "enable.partition.eof": True,
                         "isolation.level": "read_committed", "fetch.wait.max.ms": 20})
    try:
        parts = [TopicPartition(t, p, 0) for t in topics
                 for p in consumer.list_topics(t, timeout=10).topics[t].partitions]
        consumer.assign(parts)
        found: dict[str, list[LogRecord]] = {t: [] for t in topics}
        _drain(consumer, {(tp.topic, tp.partition) for tp in parts}, found, timeout_s)
    finally:
        consumer.close()
    for records in found.values():
        records.sort(key=lambda r: (r.partition, r.offset))
    return found


def _drain(consumer: Consumer, open_parts: set[tuple[str, int]], found: dict[str, list[LogRecord]],
           timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while open_parts:
        if time.monotonic() > deadline:
            raise InfrastructureError(f"snapshot did not reach the end of {sorted(open_parts)}", retryable=True)
        for msg in consumer.consume(1000, 0.2):
            if msg.error() is not None:
                open_parts.discard((msg.topic(), msg.partition()))
                continue
            found[msg.topic()].append(LogRecord(msg.topic(), msg.partition(), msg.offset(), msg.key(),
                                                msg.value(), tuple(msg.headers() or ()), msg.timestamp()[1]))


class OwnBroker:
    """A second broker (scripts/kafka.sh with its own home and ports) that a row may stop and start."""

    def __init__(self, home: Path, port: int = 39092, controller_port: int = 39093) -> None:
        self.home = home
        self.port = port
        self.controller_port = controller_port

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def _run(self, action: str, timeout_s: float = 180.0) -> None:
        libs = Path(os.environ.get("KAFKA_LIBS", REPO / ".runfacts/kafka/libs"))
        env = {**os.environ, "RUNFACTS_HOME": str(self.home), "KAFKA_PORT": str(self.port),
               "KAFKA_CONTROLLER_PORT": str(self.controller_port), "KAFKA_HEAP": "384m"}
        if (libs / ".complete").exists():
            env["KAFKA_LIBS"] = str(libs)
        with (self.home / "kafka-sh.log").open("a") as log:
            done = subprocess.run([str(REPO / "scripts/kafka.sh"), action], env=env, stdout=log,
                                  stderr=subprocess.STDOUT, timeout=timeout_s, check=False)
        if done.returncode != 0:
            raise InfrastructureError(f"kafka.sh {action} on port {self.port} failed; see "
                                      f"{self.home / 'kafka-sh.log'}", retryable=False)

    def start(self) -> str:
        self.home.mkdir(parents=True, exist_ok=True)
        self._run("start")
        return self.bootstrap

    def stop(self) -> None:
        self._run("stop")
