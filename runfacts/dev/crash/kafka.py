"""Kafka plumbing of the crash matrix: topics, producing inputs, a broker of its own, a cluster.

Snapshots of topics come from `runfacts.logread`. `OwnBroker` runs a second single-node
broker through scripts/kafka.sh on other ports and its own data directory, so a row can stop
and restart a broker without touching the shared one. `Cluster` drives the three-broker
cluster of scripts/kafka-cluster.sh (its own ports and RUNFACTS_HOME) node by node.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterable
from pathlib import Path

from confluent_kafka import Producer

from runfacts.dev.crash.workload import Input
from runfacts.dev.services import REPO, run_script_logged
from runfacts.partitioning import PRODUCER_PARTITIONING
from runfacts.schemas.errors import InfrastructureError
from runfacts.settings import KafkaSettings
from runfacts.topics import TopicNames, apply_topics, runfacts_topics


def provision(bootstrap: str, names: TopicNames, partitions: int, replication: int = 1) -> None:
    """Create the runfacts topics under `names` (changelogs: the engine creates its own)."""
    apply_topics(KafkaSettings(bootstrap_servers=bootstrap, replication_factor=replication),
                 runfacts_topics(names, partitions))


def produce(bootstrap: str, topic: str, inputs: Iterable[Input], timeout_s: float = 30.0) -> int:
    """Produce inputs in order (idempotent producer, so acks=all: no duplicates from retries, and a
    record counts as sent once the in-sync replicas have it); returns the count."""
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "linger.ms": 5,
                         **PRODUCER_PARTITIONING})  # murmur2, as every runfacts producer
    count = 0
    for item in inputs:
        producer.produce(topic, item.value, item.key, headers=list(item.headers) or None)
        count += 1
    left = producer.flush(timeout_s)
    if left:
        raise InfrastructureError(f"{left} inputs to {topic} not delivered in {timeout_s:.0f} s", retryable=True)
    return count


def group_lag(bootstrap: str, prefix: str, timeout_s: float = 10.0) -> dict[str, int]:
    """Per consumer group whose name starts with `prefix`: records not yet consumed (high
    watermark - committed offset, summed over the partitions it has committed)."""
    from confluent_kafka import Consumer, ConsumerGroupTopicPartitions, TopicPartition
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": bootstrap})
    listed = admin.list_consumer_groups(request_timeout=timeout_s).result(timeout_s)
    groups = sorted(g.group_id for g in listed.valid if g.group_id.startswith(prefix) and
                    not g.group_id.endswith("-restore"))
    lag: dict[str, int] = {}
    if not groups:
        return lag
    reader = Consumer({"bootstrap.servers": bootstrap, "group.id": f"{prefix}-lag-probe",
                       "enable.auto.commit": False})
    try:
        for group in groups:
            offsets = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group)])
            committed: list[TopicPartition] = offsets[group].result(timeout_s).topic_partitions or []
            total = 0
            for tp in committed:
                if tp.offset < 0:
                    continue
                _, high = reader.get_watermark_offsets(TopicPartition(tp.topic, tp.partition), timeout_s)
                total += max(0, high - tp.offset)
            lag[group] = total
    finally:
        reader.close()
    return lag


class OwnBroker:
    """A second broker (scripts/kafka.sh with its own home and ports) that a row may stop and start."""

    def __init__(self, home: Path, port: int = 39092, controller_port: int = 39093,
                 advertised_port: int | None = None) -> None:
        self.home = home
        self.port = port
        self.controller_port = controller_port
        self.advertised_port = advertised_port
        """Clients are told to connect here instead (a proxy in front of the broker)."""

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.advertised_port or self.port}"

    def _run(self, action: str, timeout_s: float = 180.0) -> None:
        libs = Path(os.environ.get("KAFKA_LIBS", REPO / ".runfacts/kafka/libs"))
        env = {"RUNFACTS_HOME": str(self.home), "KAFKA_PORT": str(self.port),
               "KAFKA_CONTROLLER_PORT": str(self.controller_port), "KAFKA_HEAP": "384m"}
        if (libs / ".complete").exists():
            env["KAFKA_LIBS"] = str(libs)
        if self.advertised_port is not None:
            extra = self.home / "advertised.properties"
            extra.write_text(f"advertised.listeners=PLAINTEXT://127.0.0.1:{self.advertised_port}\n")
            env["KAFKA_EXTRA_PROPERTIES"] = str(extra)
        run_script_logged("kafka.sh", action, env, self.home / "kafka-sh.log", f"on port {self.port}", timeout_s)

    def start(self) -> str:
        self.home.mkdir(parents=True, exist_ok=True)
        self._run("start")
        return self.bootstrap

    def stop(self) -> None:
        self._run("stop")


class Cluster:
    """The three-broker cluster of scripts/kafka-cluster.sh under its own RUNFACTS_HOME: start,
    stop, kill -9, pause (SIGSTOP) and resume a node; which node leads a partition or the quorum."""

    NODES = (1, 2, 3)

    def __init__(self, home: Path) -> None:
        self.home = home

    def run(self, *args: str, timeout_s: float = 400.0) -> str:
        """`scripts/kafka-cluster.sh ARGS`; its stdout (status exits 3 with a node down: not an error)."""
        self.home.mkdir(parents=True, exist_ok=True)
        env = {**os.environ, "RUNFACTS_HOME": str(self.home)}
        done = subprocess.run([str(REPO / "scripts/kafka-cluster.sh"), *args], env=env, capture_output=True,
                              text=True, timeout=timeout_s, check=False)
        with (self.home / "kafka-cluster-sh.log").open("a") as log:
            log.write(f"$ kafka-cluster.sh {' '.join(args)} -> {done.returncode}\n{done.stdout}{done.stderr}")
        if done.returncode not in (0, 3) or (done.returncode == 3 and args[0] != "status"):
            raise InfrastructureError(f"kafka-cluster.sh {' '.join(args)} exited {done.returncode}: "
                                      f"{done.stderr.strip()[-500:]}; see {self.home / 'kafka-cluster-sh.log'}",
                                      retryable=False)
        return done.stdout

    @property
    def bootstrap(self) -> str:
        return self.run("bootstrap").strip()

    def start(self, node: int | None = None) -> str:
        """Start every node not running (or `node`); the bootstrap servers."""
        self.run("start", *([str(node)] if node else []))
        return self.bootstrap

    def stop(self, node: int | None = None) -> None:
        self.run("stop", *([str(node)] if node else []))

    def kill(self, node: int) -> None:
        self.run("kill", str(node))

    def pause(self, node: int) -> None:
        self.run("pause", str(node))

    def resume(self, node: int) -> None:
        self.run("resume", str(node))

    def rss_mb(self) -> dict[int, int]:
        """Resident memory of each running node, in MB (from `status`)."""
        out = {}
        for line in self.run("status").splitlines():
            parts = dict(p.split("=", 1) for p in line.split() if "=" in p)
            if line.startswith("node ") and "rss" in parts:
                out[int(line.split()[1])] = int(parts["rss"].removesuffix("MB") or 0)
        return out

    def leader(self, topic: str, partition: int = 0) -> int:
        """The broker (node id) leading `topic`[`partition`] now."""
        from confluent_kafka.admin import AdminClient

        meta = AdminClient({"bootstrap.servers": self.bootstrap}).list_topics(topic, timeout=30)
        return int(meta.topics[topic].partitions[partition].leader)

    def controller(self) -> int:
        """The node leading the KRaft quorum (the active controller): the newest epoch's leader
        in the nodes' quorum-state files."""
        import json

        best = (-1, 0)
        for node in self.NODES:
            path = self.home / f"kafka-cluster/node-{node}/data/__cluster_metadata-0/quorum-state"
            try:
                state = json.loads(path.read_text())
            except (OSError, ValueError):
                continue
            if state.get("leaderId", -1) > 0:
                best = max(best, (int(state["leaderEpoch"]), int(state["leaderId"])))
        if best[1] == 0:
            raise InfrastructureError(f"no quorum leader recorded under {self.home}", retryable=True)
        return best[1]
