"""The demo's readers: the events log (followed as it grows), and the run-state, user-view
and audit topics (read from the beginning by a NEW read_committed consumer each time: a
page refresh)."""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Callable
from typing import Any

from confluent_kafka import Consumer, TopicPartition

from runfacts.logread import read_to_end
from runfacts.projections import user_view
from runfacts.projections.audit import reducer as audit
from runfacts.schemas import codec
from runfacts.schemas.common import EventBase
from runfacts.schemas.errors import InvalidInput, RunfactsError
from runfacts.schemas.models import decode_event
from runfacts.settings import KafkaSettings

Predicate = Callable[[list[EventBase]], bool]


class DemoTimeout(RunfactsError):
    """The story waited for something that did not happen in time."""


def _consumer(kafka: KafkaSettings, topic: str) -> Consumer:
    consumer = Consumer(kafka.client_config(**{
        "group.id": f"runfacts-demo-reader-{uuid.uuid4().hex[:8]}", "enable.auto.commit": False,
        "isolation.level": "read_committed", "enable.partition.eof": True,
        "fetch.wait.max.ms": 50}))
    partitions = consumer.list_topics(topic, timeout=10).topics[topic].partitions
    consumer.assign([TopicPartition(topic, p, 0) for p in partitions])
    return consumer


class EventLog:
    """Follows the events topic from offset 0 (read_committed) and keeps every run's events."""

    def __init__(self, kafka: KafkaSettings, topic: str) -> None:
        self._consumer = _consumer(kafka, topic)
        self.runs: dict[str, list[EventBase]] = {}
        self.ids: list[str] = []

    def poll(self, timeout: float = 0.05) -> None:
        for msg in self._consumer.consume(500, timeout):
            if msg.error() is None:
                event = decode_event(codec.default_codec(), msg.value())
                self.runs.setdefault(event.runId, []).append(event)
                self.ids.append(event.eventId)

    def of(self, run_id: str) -> list[EventBase]:
        return list(self.runs.get(run_id, []))

    def wait(self, run_id: str, what: str, done: Predicate, timeout: float = 30.0) -> list[EventBase]:
        """Poll until `done(events of the run)`; DemoTimeout naming `what` otherwise."""
        deadline = time.monotonic() + timeout
        while not done(self.of(run_id)):
            if time.monotonic() > deadline:
                seen = [e.eventType for e in self.of(run_id)][-8:]
                raise DemoTimeout(f"waited {timeout:.0f}s for {what} on {run_id}; last events: {seen}")
            self.poll()
        return self.of(run_id)

    def close(self) -> None:
        self._consumer.close()


def has(event_type: str, **fields: Any) -> Predicate:
    """A predicate: some event of `event_type` whose payload has these field values."""
    def done(events: list[EventBase]) -> bool:
        return any(e.eventType == event_type and all(getattr(e.payload, k, None) == v for k, v in fields.items())
                   for e in events)
    return done


def read_latest(kafka: KafkaSettings, topic: str, key: bytes, timeout: float = 15.0) -> bytes | None:
    """The key's latest committed value (None: none, or a tombstone), read by a fresh
    read_committed consumer from the topic's start: what a page refresh sees."""
    values = read_all(kafka, topic, key, timeout)
    return values[-1] if values else None


def read_all(kafka: KafkaSettings, topic: str, key: bytes | None = None,
             timeout: float = 15.0) -> list[bytes | None]:
    """Every committed value of `key` (every record with None), read to the topic's end by the
    one topic reader (runfacts.logread)."""
    records = read_to_end(kafka.bootstrap_servers, [topic], timeout, config=kafka.client_config(),
                          group_prefix="runfacts-demo-reader")[topic]
    return [r.value for r in records if key is None or r.key == key]


def read_state(kafka: KafkaSettings, topic: str, run_id: str, timeout: float = 15.0) -> dict[str, Any] | None:
    """The run's latest committed state (JSON) from the run-state topic."""
    value = read_latest(kafka, topic, run_id.encode(), timeout)
    return None if value is None else json.loads(value)


def read_view(kafka: KafkaSettings, topic: str, run_id: str, timeout: float = 15.0) -> dict[str, Any] | None:
    """The run's latest committed user view from the view topic, decoded with its schema."""
    value = read_latest(kafka, topic, run_id.encode(), timeout)
    return None if value is None else user_view.schema().decode(value)


def read_audit(kafka: KafkaSettings, topic: str, run_id: str, timeout: float = 15.0) -> list[audit.AuditRecord]:
    """The run's audit records, in the audit topic's order."""
    prefix = audit.schema().prefix()
    records = []
    for value in read_all(kafka, topic, run_id.encode(), timeout):
        if value is None or value[:10] != prefix:
            raise InvalidInput(f"not an AuditRecord v1 in {topic} for {run_id}", schema=audit.SCHEMA)
        records.append(audit.decode(value[10:]))
    return records
