"""THE topic reader: every way runfacts reads a topic back to its current end (LAYOUT rule 7).

- `read_to_end(bootstrap, topics)` reads whole topics up to the end a read_committed consumer
  sees now (the last stable offset: an open transaction of a killed worker hides what follows
  it until it is aborted), each partition in offset order, as `LogRecord`s. Used by the crash
  matrix's oracle, `runfacts dlq` and the demo.
- `log_range(settings, topic, from_offset)` fixes where to start (the beginning, or an offset
  per partition) and where to stop (each partition's end, the last stable offset);
  `batches(settings, range)` then yields the messages in that range and stops, even when
  writers go on appending. Used by replay, audit verify, trajectories export and the sinks.
- `watermarks` and `partition_count`: the metadata every reader needs, with the waiting and
  the errors (InfrastructureError naming the topic) in one place.

No consumer group, no commits: partitions are assigned by hand, so a replay or a
verification never disturbs the live applications' offsets. librdkafka still looks up the
coordinator of the (required) group.id, so on a secured cluster it is a fresh one under the
reading component's ACL prefix: `<topic prefix>-<component>-<12 hex>` (topics.reader_group).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any, Protocol, cast

from confluent_kafka import (
    OFFSET_BEGINNING,
    Consumer,
    KafkaError,
    KafkaException,
    Message,
    TopicPartition,
)

from runfacts.schemas.errors import ConfigError, InfrastructureError
from runfacts.settings import KafkaSettings
from runfacts.topics import group_prefix, reader_group

_log = logging.getLogger("runfacts.logread")

RETRIABLE_METADATA = frozenset({"_UNKNOWN_PARTITION", "NOT_LEADER_FOR_PARTITION", "NOT_LEADER_OR_FOLLOWER",
                                "LEADER_NOT_AVAILABLE",
                                "UNKNOWN_TOPIC_OR_PART", "_TIMED_OUT"})


def consume_ready(consumer: Consumer, limit: int, timeout_s: float) -> list[Any]:
    """Up to `limit` messages: waits at most `timeout_s` for the first, then takes only what is
    already fetched. librdkafka's `consume(limit, timeout)` returns early only with `limit`
    messages, so a record arriving alone waited out the whole timeout: the client follower's
    0.1 s put every answer on a 100 ms step (docs/engine.md, "A consume hands over what has arrived").
    A backlog still comes in full batches."""
    first = consumer.consume(1, timeout_s)
    if not first or limit <= 1:
        return first
    return first + consumer.consume(limit - 1, 0)


def watermarks(consumer: Consumer, tp: TopicPartition, timeout_s: float = 30.0) -> tuple[int, int]:
    """(low, high) offsets of a partition, waiting out a just-created topic's missing leader
    (metadata lags creation, more so on a loaded broker) until `timeout_s`; an
    InfrastructureError naming the partition when the error is not transient or time is up."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            return consumer.get_watermark_offsets(tp, timeout=max(0.5, deadline - time.monotonic()), cached=False)
        except KafkaException as exc:
            error = exc.args[0] if exc.args else None
            code = error.name() if error is not None else ""
            transient = error is not None and (code in RETRIABLE_METADATA or error.retriable())
            if not transient or time.monotonic() >= deadline:
                raise InfrastructureError(f"offsets of {tp.topic}[{tp.partition}]: {exc}",
                                          retryable=transient) from exc
            _log.info("%s[%d] not ready (%s): retrying", tp.topic, tp.partition, code)
            time.sleep(0.2)


def partition_count(consumer: Consumer, topic: str, timeout: float) -> int:
    """Partitions of `topic`; an InfrastructureError naming it when it is missing."""
    try:
        meta = consumer.list_topics(topic, timeout=timeout).topics.get(topic)
    except Exception as exc:  # noqa: BLE001 - KafkaException: broker unreachable
        raise InfrastructureError(f"cannot reach Kafka for topic {topic}: {exc}", retryable=True) from exc
    if meta is None or meta.error is not None or not meta.partitions:
        raise InfrastructureError(f"topic {topic} not found (run `runfacts topics apply`?)", retryable=False)
    return len(meta.partitions)


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


def read_to_end(bootstrap: str, topics: Iterable[str], timeout_s: float = 20.0,
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


FETCH_CONFIG = {
    "enable.auto.commit": False,
    "enable.auto.offset.store": False,
    "isolation.level": "read_committed",
    "enable.partition.eof": True,
    "fetch.max.bytes": 64 * 1024 * 1024,
    "max.partition.fetch.bytes": 16 * 1024 * 1024,
    "queued.min.messages": 200_000,
}


# A data message (not an error event) always names its partition and offset.
_data_partition = cast("Callable[[Message], int]", Message.partition)
_data_offset = cast("Callable[[Message], int]", Message.offset)


class DataMessage(Protocol):
    """A consumed record that is not an error event: its topic, partition and offset are set."""

    def topic(self) -> str: ...
    def partition(self) -> int: ...
    def offset(self) -> int: ...
    def key(self) -> bytes | None: ...
    def value(self) -> bytes | None: ...


SETTLING = frozenset({KafkaError.NOT_LEADER_FOR_PARTITION, KafkaError.LEADER_NOT_AVAILABLE})
"""Answers about a topic created a moment ago whose leaders are still being elected: worth a
retry even where librdkafka does not flag them retriable."""


@dataclass(frozen=True)
class LogRange:
    """Per partition: first offset to read and the end offset (exclusive) of one topic."""

    topic: str
    start: dict[int, int]
    end: dict[int, int]

    @property
    def total(self) -> int:
        """How many offsets the range spans (an upper bound on records: markers count too)."""
        return sum(max(0, self.end[p] - self.start[p]) for p in self.start)

    @property
    def partitions(self) -> list[int]:
        return sorted(self.start)


@dataclass(frozen=True)
class ReadOptions:
    """How to read a topic range."""

    batch_size: int = 10_000
    poll_timeout_s: float = 1.0
    idle_timeout_s: float = 30.0
    """Give up when no message or end-of-partition arrives for this long."""
    client: dict[str, Any] = field(default_factory=dict)
    component: str = "auditor"
    """Whose reader this is: the group id goes under the prefix its ACLs grant (runfacts.security.acls)."""


def consumer(settings: KafkaSettings, options: ReadOptions | None = None) -> Consumer:
    """A never-committing, read_committed consumer for hand-assigned partitions."""
    options = options or ReadOptions()
    conf = settings.client_config(**{**FETCH_CONFIG, **options.client})
    conf["group.id"] = reader_group(group_prefix(settings.topic_prefix, options.component))
    return Consumer(conf)


def log_range(settings: KafkaSettings, topic: str, from_offset: int | None = None,
             timeout: float = 30.0, options: ReadOptions | None = None) -> LogRange:
    """The range to read now: from the beginning (or `from_offset` per partition) to the end.

    Retries retriable broker answers and `SETTLING` ones (a topic created a moment ago may
    have no leader yet) until `timeout`."""
    client = consumer(settings, options)
    deadline = time.monotonic() + timeout
    try:
        while True:
            try:
                return _range(client, topic, from_offset, timeout)
            except KafkaException as exc:
                error = exc.args[0] if exc.args else None
                retriable = isinstance(error, KafkaError) and (
                    error.retriable() or error.code() in SETTLING)
                if not retriable or time.monotonic() > deadline:
                    raise InfrastructureError(f"reading offsets of {topic}: {exc}",
                                              retryable=retriable) from exc
                time.sleep(0.2)
    finally:
        client.close()


def _range(client: Consumer, topic: str, from_offset: int | None, timeout: float) -> LogRange:
    metadata = client.list_topics(topic, timeout=timeout).topics.get(topic)
    error = None if metadata is None else metadata.error
    if error is not None and error.retriable() and \
            error.code() != KafkaError.UNKNOWN_TOPIC_OR_PART:
        raise KafkaException(error)
    if metadata is None or metadata.error is not None or not metadata.partitions:
        raise ConfigError("topic", topic, "does not exist (or has no partitions) on this cluster: check "
                          "RUNFACTS_KAFKA_TOPIC_PREFIX and the bootstrap servers, or create the topics "
                          "with `runfacts topics apply`")
    start, end = {}, {}
    for p in sorted(metadata.partitions):
        low, high = watermarks(client, TopicPartition(topic, p), timeout)
        start[p] = low if from_offset is None else max(low, min(from_offset, high))
        end[p] = high
    return LogRange(topic, start, end)


def batches(settings: KafkaSettings, log: LogRange,
            options: ReadOptions | None = None) -> Iterator[list[DataMessage]]:
    """The messages of `log`, in batches, per-partition order kept; stops at the range's end."""
    options = options or ReadOptions()
    pending = {p for p in log.partitions if log.start[p] < log.end[p]}
    if not pending:
        return
    client = consumer(settings, options)
    try:
        client.assign([TopicPartition(log.topic, p, log.start[p] if log.start[p] > 0
                                      else OFFSET_BEGINNING) for p in sorted(pending)])
        yield from _drain_range(client, log, pending, options)
    finally:
        client.close()


def _drain_range(client: Consumer, log: LogRange, pending: set[int],
           options: ReadOptions) -> Iterator[list[DataMessage]]:
    idle = 0.0
    while pending:
        messages = client.consume(options.batch_size, options.poll_timeout_s)
        idle = idle + options.poll_timeout_s if not messages else 0.0
        if idle >= options.idle_timeout_s:
            raise InfrastructureError(f"no progress reading {log.topic} partitions "
                                      f"{sorted(pending)} for {idle:.0f}s", retryable=True)
        batch = []
        for message in messages:
            error = message.error()
            if error is not None:
                _on_error(error, message.partition(), log.topic, pending)
                continue
            partition, offset = _data_partition(message), _data_offset(message)
            if partition in pending and offset < log.end[partition]:
                batch.append(message)
                if offset >= log.end[partition] - 1:
                    pending.discard(partition)
            else:
                pending.discard(partition)
        if batch:
            yield cast("list[DataMessage]", batch)


def _on_error(error: KafkaError, partition: int | None, topic: str, pending: set[int]) -> None:
    if error.code() == KafkaError._PARTITION_EOF:
        if partition is not None:
            pending.discard(partition)
        return
    raise InfrastructureError(f"reading {topic}[{partition}]: {error}",
                              retryable=error.retriable())
