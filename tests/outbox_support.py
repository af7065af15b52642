"""Outbox test helpers: a small fastavro encoder (stand-in for the real codec), Kafka helpers.

The real codec (runfacts.schemas.codec) plugs into `Outbox(encoder=...)` the same way.
"""

from __future__ import annotations

import io
import time
from collections import defaultdict
from dataclasses import dataclass

import fastavro
from confluent_kafka import Consumer
from confluent_kafka.admin import AdminClient, NewTopic

from runfacts.connectors.outbox.writer import EncodedRecord

SCHEMA = fastavro.parse_schema({
    "type": "record", "name": "DemoHappened", "namespace": "runfacts.test",
    "fields": [
        {"name": "eventId", "type": "string"},
        {"name": "runId", "type": "string"},
        {"name": "n", "type": "long"},
        {"name": "note", "type": "string"},
    ],
})


@dataclass(frozen=True)
class DemoEvent:
    """A test event: `n` is its position within its run (the oracle for ordering)."""

    event_id: str
    run_id: str
    n: int
    note: str = ""


@dataclass(frozen=True)
class AvroEncoder:
    """Validates and Avro-encodes DemoEvents for one topic."""

    topic: str

    def encode(self, event: DemoEvent) -> EncodedRecord:
        record = {"eventId": event.event_id, "runId": event.run_id, "n": event.n,
                  "note": event.note}
        fastavro.validation.validate(record, SCHEMA, raise_errors=True)
        out = io.BytesIO()
        fastavro.schemaless_writer(out, SCHEMA, record)
        return EncodedRecord(self.topic, event.run_id, out.getvalue(), event.event_id,
                             (("eventType", b"test.demo.happened"),))


def decode(value: bytes) -> dict:
    return fastavro.schemaless_reader(io.BytesIO(value), SCHEMA)


def create_topic(bootstrap: str, name: str, partitions: int = 3) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.create_topics([NewTopic(name, partitions, 1)]).values():
        future.result(30)


@dataclass(frozen=True)
class Received:
    key: str
    event_id: str
    header_event_id: str
    value: bytes


def consume(bootstrap: str, topic: str, expected_unique: int, timeout_s: float = 60.0,
            group: str = "") -> list[Received]:
    """Read `topic` (read_committed) until `expected_unique` distinct eventIds arrived."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group or f"g-{topic}",
                         "auto.offset.reset": "earliest", "enable.auto.commit": False,
                         "isolation.level": "read_committed", "fetch.wait.max.ms": 20})
    consumer.subscribe([topic])
    got: list[Received] = []
    seen: set[str] = set()
    deadline = time.monotonic() + timeout_s
    try:
        while len(seen) < expected_unique and time.monotonic() < deadline:
            for msg in consumer.consume(1000, 0.2):
                if msg.error():
                    continue
                headers = dict(msg.headers() or [])
                body = decode(msg.value())
                got.append(Received(msg.key().decode(), body["eventId"],
                                    headers["eventId"].decode(), msg.value()))
                seen.add(body["eventId"])
    finally:
        consumer.close()
    return got


def per_run_first_seen(received: list[Received]) -> dict[str, list[int]]:
    """Per run, the `n` of each event in order of its first delivery (duplicates dropped)."""
    seen: set[str] = set()
    order: dict[str, list[int]] = defaultdict(list)
    for rec in received:
        if rec.event_id not in seen:
            seen.add(rec.event_id)
            order[rec.key].append(decode(rec.value)["n"])
    return dict(order)


def duplicates_are_identical(received: list[Received]) -> bool:
    """Every repeated eventId repeats the same bytes (a duplicate, not a different event)."""
    first: dict[str, bytes] = {}
    for rec in received:
        if first.setdefault(rec.event_id, rec.value) != rec.value:
            return False
        if rec.header_event_id != rec.event_id:
            return False
    return True


def drop_outbox(dsn: str, table: str, *extra: str) -> None:
    """Remove an outbox's tables (and `extra` tables) after a test on the shared database."""
    import psycopg

    names = [table, f"{table}_parked", f"{table}_lease", f"{table}_archive", *extra]
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(f"DROP TABLE IF EXISTS {', '.join(names)}")
