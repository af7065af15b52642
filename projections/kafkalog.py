"""Reading a fixed range of a topic, in batches, read_committed (the shells' input side).

`snapshot` fixes where to start (the beginning, or an offset per partition) and where to
stop (each partition's end as a read_committed consumer sees it now: the last stable
offset); `batches` then yields the messages in that range and stops, even when writers go
on appending. No consumer group, no commits: partitions are assigned by hand, so a replay
or a verification never disturbs the live applications' offsets. librdkafka still looks up
the coordinator of the (required) group.id, so on a secured cluster it is a fresh one under
the reading component's ACL prefix: `<topic prefix>-<ReadOptions.component>-<12 hex>`.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
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
from runfacts.topics import group_prefix, reader_group, watermarks

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


def snapshot(settings: KafkaSettings, topic: str, from_offset: int | None = None,
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
        raise ConfigError("topic", topic, "does not exist (or has no partitions)")
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
        yield from _drain(client, log, pending, options)
    finally:
        client.close()


def _drain(client: Consumer, log: LogRange, pending: set[int],
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
