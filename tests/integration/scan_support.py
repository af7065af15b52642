"""Scanning topics for secrets and personal data (issue 11): what a run wrote, byte by byte."""

from __future__ import annotations

import base64
import hashlib
import time
import uuid
from collections.abc import Iterable
from typing import Any, NamedTuple

from confluent_kafka import Consumer, TopicPartition

from runfacts.schemas import codec
from runfacts.schemas.pii import redact
from runfacts.settings import KafkaSettings


class Found(NamedTuple):
    """A needle in a record: which topic, where, and which needle (by its label)."""

    topic: str
    partition: int
    offset: int
    label: str


def records(kafka: KafkaSettings, topic: str, timeout: float = 20.0) -> list[Any]:
    """Every record of `topic`, aborted transactions' too (read_uncommitted: what is on disk)."""
    consumer = Consumer(kafka.client_config(**{
        "group.id": f"scan-{uuid.uuid4().hex}", "enable.auto.commit": False, "enable.partition.eof": True,
        "isolation.level": "read_uncommitted", "fetch.wait.max.ms": 20}))
    try:
        parts = consumer.list_topics(topic, timeout=10).topics[topic].partitions
        consumer.assign([TopicPartition(topic, p, 0) for p in parts])
        found, eof, deadline = [], set(), time.monotonic() + timeout
        while len(eof) < len(parts):
            if time.monotonic() > deadline:
                raise TimeoutError(f"reading {topic}: partitions {sorted(set(parts) - eof)} not at their end")
            for msg in consumer.consume(1000, 0.1):
                if msg.error() is None:
                    found.append(msg)
                else:
                    eof.add(msg.partition())
        return found
    finally:
        consumer.close()


def blob(msg: Any) -> bytes:
    """A record's key, value and headers as one byte string."""
    parts = [msg.key() or b"", msg.value() or b""]
    for key, value in msg.headers() or ():
        parts += [key.encode(), value or b""]
    return b"\x00".join(parts)


def scan(topic: str, messages: Iterable[Any], needles: dict[str, bytes]) -> list[Found]:
    """Every (record, needle) where the needle's bytes occur in the record."""
    return [Found(topic, m.partition(), m.offset(), label)
            for m in messages for label, needle in needles.items() if needle in blob(m)]


def secret_needles(**secrets: str) -> dict[str, bytes]:
    """Each secret as configured, and base64 keys also as their raw bytes."""
    needles = {name: value.encode() for name, value in secrets.items()}
    for name, value in secrets.items():
        try:
            raw = base64.urlsafe_b64decode(value + "=" * (-len(value) % 4))
        except ValueError:
            continue
        if len(raw) >= 16:
            needles[f"{name} (raw bytes)"] = raw
    return needles


def _leaves(value: Any) -> set[str]:
    if isinstance(value, dict):
        return {leaf for v in value.values() for leaf in _leaves(v)}
    if isinstance(value, list | tuple):
        return {leaf for v in value for leaf in _leaves(v)}
    return {value} if isinstance(value, str) else set()


def personal_values(values: Iterable[bytes], min_length: int = 4) -> set[str]:
    """Values of `"pii": true` fields in these command/event records, minus values that also
    appear in fields not marked personal (service identities such as "dispatcher")."""
    personal: set[str] = set()
    public: set[str] = set()
    for value in values:
        model = codec.decode(value)
        every, masked = _leaves(model.model_dump(mode="json")), _leaves(redact(model).model_dump(mode="json"))
        personal |= every - masked
        public |= masked
    return {v for v in personal - public if len(v) >= min_length}


def personal_needles(values: Iterable[str]) -> dict[str, bytes]:
    """Each personal value in clear, and its unkeyed SHA-256 (a plain digest of a guessable
    value such as a user id is as good as the value: hash the guesses and compare)."""
    needles: dict[str, bytes] = {}
    for value in values:
        needles[value] = value.encode()
        needles[f"sha256({value})"] = hashlib.sha256(value.encode()).hexdigest().encode()
    return needles
