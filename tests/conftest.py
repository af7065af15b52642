"""Shared fixtures: a real Kafka broker (never a fake), a real three-broker cluster, unique topic names."""

from __future__ import annotations

import contextlib
import os
import uuid
from collections.abc import Iterator
from typing import TYPE_CHECKING

import pytest

from runfacts.dev.services import LocalKafka, docker_available

if TYPE_CHECKING:
    from runfacts.dev.crash.kafka import Cluster

KAFKA_IMAGE = "apache/kafka:4.1.0"


def _testcontainers_kafka() -> Iterator[str]:
    """apache/kafka in Docker (testcontainers' KafkaContainer only knows Confluent images)."""
    from testcontainers.core.container import DockerContainer
    from testcontainers.core.waiting_utils import wait_for_logs

    container = (
        DockerContainer(KAFKA_IMAGE)
        .with_bind_ports(9092, 19092)
        .with_env("KAFKA_LISTENERS", "PLAINTEXT://:9092,CONTROLLER://:9093")
        .with_env("KAFKA_ADVERTISED_LISTENERS", "PLAINTEXT://127.0.0.1:19092")
    )
    for key, value in _compose_broker_env().items():
        container = container.with_env(key, value)
    with container:
        wait_for_logs(container, "Kafka Server started", timeout=120)
        yield "127.0.0.1:19092"


def _compose_broker_env() -> dict[str, str]:
    from runfacts.dev.services import REPO

    env: dict[str, str] = {}
    for line in (REPO / "scripts/kafka/broker.properties").read_text().splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            key, _, value = line.partition("=")
            env["KAFKA_" + key.upper().replace(".", "_")] = value
    env["KAFKA_CONTROLLER_QUORUM_VOTERS"] = "1@localhost:9093"
    return env


@pytest.fixture(scope="session")
def kafka_bootstrap() -> Iterator[str]:
    """Bootstrap servers of a real broker: $KAFKA_BOOTSTRAP_SERVERS, Docker, or scripts/kafka.sh."""
    configured = os.environ.get("KAFKA_BOOTSTRAP_SERVERS")
    if configured:
        yield configured
    elif docker_available():
        yield from _testcontainers_kafka()
    else:
        yield LocalKafka().start()


@pytest.fixture(scope="session")
def kafka_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    """Three KRaft brokers (scripts/kafka-cluster.sh, ports 39292-39294 / 39392-39394) in a home of
    the session's own, started on first use and stopped when the session ends (~0.3 GB RSS each)."""
    from runfacts.dev.crash.kafka import Cluster

    cluster = Cluster(tmp_path_factory.mktemp("kafka-cluster"))
    cluster.start()
    try:
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture
def unique(request: pytest.FixtureRequest) -> Iterator[str]:
    """A short unique suffix for topic and group names, so tests never share data.

    Topics whose names contain it are deleted after the test (when it used the broker):
    every partition holds open files on the broker, and a long test session must not
    exhaust them.
    """
    suffix = uuid.uuid4().hex[:10]
    yield suffix
    if "kafka_bootstrap" in request.fixturenames:
        _delete_topics_containing(request.getfixturevalue("kafka_bootstrap"), suffix)


def _delete_topics_containing(bootstrap: str, suffix: str) -> None:
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": bootstrap})
    names = [t for t in admin.list_topics(timeout=10).topics if suffix in t]
    if names:
        for future in admin.delete_topics(names, request_timeout=30).values():
            with contextlib.suppress(Exception):  # already gone, or the broker is shutting down
                future.result()


@pytest.fixture(scope="session")
def postgres_dsn() -> str:
    """DSN of a real PostgreSQL: $RUNFACTS_PG_DSN, or the local server of scripts/postgres.sh."""
    configured = os.environ.get("RUNFACTS_PG_DSN")
    if configured:
        return configured
    from runfacts.dev.services import LocalPostgres

    return LocalPostgres().start()
