"""Helpers for the engine's integration tests: topics, producing, reading, engines in threads."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from runfacts.dev.apps import counter_app
from runfacts.partitioning import PRODUCER_PARTITIONING
from runfacts.processors.engine.api import Application
from runfacts.processors.engine.runner import Engine
from runfacts.processors.engine.settings import EngineSettings


def create_topics(bootstrap: str, names: Iterable[str], partitions: int = 6) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    names = list(names)
    futures = admin.create_topics([NewTopic(n, partitions, 1) for n in names])
    for future in futures.values():
        future.result()
    # CreateTopics answers once the controller has the topics; a broker's metadata may lag
    # behind it on a loaded machine. Wait until every topic shows all its partitions, so an
    # engine started next never finds its source missing.
    deadline = time.monotonic() + 30
    while True:
        topics = admin.list_topics(timeout=10).topics
        if all(n in topics and len(topics[n].partitions) == partitions for n in names):
            return
        assert time.monotonic() < deadline, f"topics {names} not in the broker's metadata after 30 s"
        time.sleep(0.1)


def produce(bootstrap: str, topic: str, records: Iterable[tuple[bytes, bytes]]) -> int:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, **PRODUCER_PARTITIONING})
    count = 0
    for key, value in records:
        producer.produce(topic, value, key)
        count += 1
    assert producer.flush(30) == 0
    return count


def read_all(bootstrap: str, topic: str, *, committed: bool = True, timeout: float = 5.0
             ) -> list[Any]:
    """Every record of `topic` up to its current end (read_committed unless committed=False)."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"reader-{time.time()}",
                         "enable.auto.commit": False, "enable.partition.eof": True,
                         "isolation.level": "read_committed" if committed else
                         "read_uncommitted"})
    parts = consumer.list_topics(topic, timeout=10).topics[topic].partitions
    consumer.assign([TopicPartition(topic, p, 0) for p in parts])
    records, eof, deadline = [], set(), time.monotonic() + timeout
    while len(eof) < len(parts) and time.monotonic() < deadline:
        for msg in consumer.consume(1000, 0.2):
            if msg.error() is None:
                records.append(msg)
            else:
                eof.add(msg.partition())
    consumer.close()
    return records


def outputs(bootstrap: str, topic: str, **kw: Any) -> list[dict]:
    return [json.loads(m.value()) for m in read_all(bootstrap, topic, **kw)]


def settings(bootstrap: str, state_dir: Path, instance: str, **kw: Any) -> EngineSettings:
    return EngineSettings(bootstrap_servers=bootstrap, state_dir=state_dir, instance_id=instance,
                          **kw)


class EngineThread:
    """An engine running in a background thread (stopped gracefully by stop())."""

    def __init__(self, app: Application, settings: EngineSettings) -> None:
        self.engine = Engine(app, settings)
        self.error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, daemon=True)

    @classmethod
    def around(cls, engine: Engine) -> EngineThread:
        runner = cls(engine.app, engine.settings)
        runner.engine = engine
        return runner

    def _run(self) -> None:
        try:
            self.engine.run()
        except BaseException as exc:
            self.error = exc

    def start(self) -> EngineThread:
        self._thread.start()
        return self

    def wait_until(self, condition: Any, timeout: float = 30.0) -> None:
        deadline = time.monotonic() + timeout
        while not condition():
            if self.error is not None:
                raise self.error
            if time.monotonic() > deadline:
                raise TimeoutError(f"condition not met in {timeout}s; stats {self.engine.stats}")
            time.sleep(0.05)

    def join(self, timeout: float = 30.0) -> None:
        self._thread.join(timeout)
        assert not self._thread.is_alive(), "engine thread did not stop"

    def stop(self) -> None:
        self.engine.stop()
        self.join()
        if self.error is not None:
            raise self.error


def check_exactly_once(records: list[dict], inputs: dict[str, int]) -> None:
    """Every key's outputs are n = 1..count, once each, with unique ids (the counter oracle)."""
    ids = [r["id"] for r in records]
    assert len(ids) == len(set(ids)), "duplicate output ids"
    by_key: dict[str, list[int]] = {}
    for r in records:
        by_key.setdefault(r["key"], []).append(r["n"])
    assert {k: sorted(v) for k, v in by_key.items()} == {
        k: list(range(1, n + 1)) for k, n in inputs.items()}


def keyed(n: int, start: int = 0, keys: int = 40) -> list[tuple[bytes, bytes]]:
    """n records spread over `keys` keys, as (key, value) pairs."""
    return [(f"k{i % keys}".encode(), b"x") for i in range(start, start + n)]


def expected(total: int, keys: int = 40) -> dict[str, int]:
    """How many records each key got from keyed(total)."""
    return {f"k{k}": len(range(k, total, keys)) for k in range(min(keys, total))}


def wait_for(condition: Any, timeout: float = 30.0, what: str = "condition") -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what} not met in {timeout}s")
        time.sleep(0.2)


def counter_topics(bootstrap: str, tag: str, unique: str, partitions: int = 6) -> tuple[str, str, str]:
    """Created input, output and dead-letter topics for a counter_app test named `tag`."""
    names = (f"{tag}-in-{unique}", f"{tag}-out-{unique}", f"{tag}-dlq-{unique}")
    create_topics(bootstrap, names, partitions)
    return names


def counter_on(tag: str, unique: str, topics: tuple[str, str, str], **kw: Any) -> Application:
    """The counter_app fixture reading topics[0], writing topics[1], dead-lettering to topics[2]."""
    return counter_app(name=f"{tag}-{unique}", source=topics[0], output=topics[1],
                       dead_letter_topic=topics[2], **kw)
