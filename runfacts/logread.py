"""Read topics back as they stand: every committed record up to the current end.

`snapshot` reads topics up to the end a read_committed consumer sees now (the last stable
offset: an open transaction of a killed worker hides what follows it until it is aborted),
each partition in offset order. Used by the crash matrix's oracle and `runfacts dlq`.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from confluent_kafka import Consumer, KafkaError, TopicPartition

from runfacts.schemas.errors import InfrastructureError
from runfacts.topics import reader_group


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


def snapshot(bootstrap: str, topics: Iterable[str], timeout_s: float = 20.0,
             config: dict[str, Any] | None = None, committed: bool = True,
             group_prefix: str = "runfacts-snapshot") -> dict[str, list[LogRecord]]:
    """Every committed record of `topics` up to their current end, per partition in offset order
    (committed=False: also records of open and aborted transactions). The reader's group id is
    a fresh one under `group_prefix` (on a secured cluster: the prefix the reader's ACLs grant)."""
    topics = list(topics)
    consumer = Consumer({**(config or {}), "bootstrap.servers": bootstrap,
                         "group.id": reader_group(group_prefix), "enable.auto.commit": False,
                         "enable.partition.eof": True,
                         "isolation.level": "read_committed" if committed else "read_uncommitted",
                         "fetch.wait.max.ms": 20})
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
                _end_or_raise(msg, open_parts)
                continue
            record = _record(msg)
            found[record.topic].append(record)


def _end_or_raise(msg: Any, open_parts: set[tuple[str, int]]) -> None:
    """An end of partition closes it; a retriable error waits (up to the timeout); any other raises,
    so a refused read (e.g. GROUP_AUTHORIZATION_FAILED) is never mistaken for an empty topic."""
    err = msg.error()
    if err.code() == KafkaError._PARTITION_EOF:
        open_parts.discard((msg.topic(), msg.partition()))
    elif not err.retriable():
        raise InfrastructureError(f"reading {msg.topic()}[{msg.partition()}]: {err}", retryable=False)


def _record(msg: Any) -> LogRecord:
    headers = tuple((str(k), v if isinstance(v, bytes) else b"") for k, v in msg.headers() or ())
    return LogRecord(str(msg.topic()), int(msg.partition()), int(msg.offset()), msg.key(), msg.value(), headers,
                     int(msg.timestamp()[1]))


