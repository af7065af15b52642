"""Kafka plumbing of the crash matrix: topics, producing inputs, a broker of its own.

Snapshots of topics come from `runfacts.logread`. `OwnBroker` runs a second single-node
broker through scripts/kafka.sh on other ports and its own data directory, so a row can stop
and restart a broker without touching the shared one.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterable
from pathlib import Path

from confluent_kafka import Producer

from runfacts.dev.crash.workload import Input
from runfacts.dev.services import REPO
from runfacts.partitioning import PRODUCER_PARTITIONING
from runfacts.schemas.errors import InfrastructureError
from runfacts.settings import KafkaSettings
from runfacts.topics import TopicNames, apply_topics, runfacts_topics


def provision(bootstrap: str, names: TopicNames, partitions: int) -> None:
    """Create the runfacts topics under `names` (changelogs: the engine creates its own)."""
    apply_topics(KafkaSettings(bootstrap_servers=bootstrap), runfacts_topics(names, partitions))


def produce(bootstrap: str, topic: str, inputs: Iterable[Input]) -> int:
    """Produce inputs in order (idempotent producer: no duplicates from retries); returns the count."""
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "linger.ms": 5,
                         **PRODUCER_PARTITIONING})  # murmur2, as every runfacts producer
    count = 0
    for item in inputs:
        producer.produce(topic, item.value, item.key, headers=list(item.headers) or None)
        count += 1
    left = producer.flush(30)
    if left:
        raise InfrastructureError(f"{left} inputs to {topic} not delivered in 30 s", retryable=True)
    return count


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
