"""Changelog topics: creation at start-up and restore of a partition's stores before processing.

Restore of one store of one partition:
  1. ask the end offset of the changelog partition (read_committed: the last stable offset,
     so records of an open or aborted transaction are never restored);
  2. start after the changelog offset the store already reflects (records already in the
     store are skipped by offset); a store claiming an offset beyond the end (changelog
     recreated) is cleared and rebuilt from the beginning;
  3. consume batches up to the end; each batch is ONE WriteBatch holding its records and the
     batch's last changelog offset, so a crash mid-restore (crash point engine.mid_restore)
     resumes from the last written batch.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from runfacts.processors.api import Application
from runfacts.processors.settings import EngineSettings, common_config, restore_config
from runfacts.processors.store import Backend, changelog_key
from runfacts.schemas.errors import ConfigError, InfrastructureError

from runfacts.crashpoints import crash_point

log = logging.getLogger("runfacts.engine")
_EOF = KafkaError._PARTITION_EOF


def prepare_topics(app: Application, settings: EngineSettings) -> int:
    """Check co-partitioned sources, create missing changelogs; return the partition count."""
    admin = AdminClient(common_config(settings))
    meta = admin.list_topics(timeout=30).topics
    counts = {s.topic: _partitions(meta, s.topic, "source") for s in app.sources}
    if len(set(counts.values())) != 1:
        raise ConfigError("application.sources", counts,
                          "co-partitioned sources need the same partition count")
    partitions = next(iter(counts.values()))
    if any(s.on_invalid == "dead_letter" for s in app.sources):
        _partitions(meta, app.dead_letter_topic, "dead-letter topic")
    missing = []
    for store in app.all_stores:
        topic = app.changelog_topic(store)
        if topic in meta:
            if _partitions(meta, topic, "changelog") != partitions:
                raise ConfigError("changelog", topic, f"must have {partitions} partitions")
        else:
            missing.append(NewTopic(topic, partitions, settings.changelog_replication_factor,
                                    config={"cleanup.policy": "compact"}))
    _create(admin, missing)
    return partitions


def _partitions(meta: dict, topic: str, what: str) -> int:
    found = meta.get(topic)
    if found is None or found.error is not None:
        raise ConfigError(what, topic, "topic does not exist (create it first)")
    return len(found.partitions)


def _create(admin: AdminClient, topics: list[NewTopic]) -> None:
    if not topics:
        return
    for topic, future in admin.create_topics(topics, request_timeout=30).items():
        try:
            future.result()
            log.info("created changelog topic %s", topic)
        except KafkaException as exc:
            if exc.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS:
                raise InfrastructureError(f"cannot create changelog {topic}: {exc}",
                                          retryable=True) from exc


class Restorer:
    """Brings a partition's stores up to the end of their changelogs."""

    def __init__(self, app: Application, settings: EngineSettings) -> None:
        self._app = app
        self._settings = settings
        self._consumer: Consumer | None = None
        self.restored = 0

    def restore(self, partition: int, backend: Backend) -> int:
        """Restore every store of `partition`; returns the number of records applied."""
        total = sum(self._restore_store(partition, backend, s) for s in self._app.all_stores)
        self.restored += total
        return total

    def _restore_store(self, partition: int, backend: Backend, store: str) -> int:
        consumer = self._client()
        tp = TopicPartition(self._app.changelog_topic(store), partition)
        low, high = consumer.get_watermark_offsets(tp, timeout=30, cached=False)
        stored = int(backend.meta().get(changelog_key(store), b"-1"))
        if stored >= high:
            log.warning("store %s[%d] claims changelog offset %d beyond the end %d: rebuilding",
                        store, partition, stored, high)
            backend.clear(store)
            stored = -1
        start = max(stored + 1, low)
        if start >= high:
            return 0
        consumer.assign([TopicPartition(tp.topic, partition, start)])
        try:
            count = self._consume_until(consumer, high, lambda batch: backend.restore(store, batch))
        finally:
            consumer.unassign()
        log.info("restored %d records into %s[%d] (changelog %d..%d)",
                 count, store, partition, start, high)
        return count

    def _consume_until(self, consumer: Consumer, end: int,
                       apply: Callable[[list], None]) -> int:
        count = 0
        deadline = time.monotonic() + self._settings.restore_timeout_s
        while True:
            msgs = consumer.consume(self._settings.restore_batch, 0.05)
            data = [m for m in msgs if m.error() is None]
            eof = len(data) != len(msgs) and _only_eof(msgs)
            if data:
                apply(data)
                count += len(data)
                crash_point("engine.mid_restore")
            if eof or (data and data[-1].offset() >= end - 1):
                return count
            if time.monotonic() > deadline:
                raise InfrastructureError(f"restore did not reach offset {end} in "
                                          f"{self._settings.restore_timeout_s}s", retryable=True)

    def _client(self) -> Consumer:
        if self._consumer is None:
            self._consumer = Consumer(restore_config(self._app, self._settings))
        return self._consumer

    def close(self) -> None:
        if self._consumer is not None:
            self._consumer.close()
            self._consumer = None


def _only_eof(msgs: list) -> bool:
    """True when the only errors are end-of-partition events; raises on any other error."""
    for m in msgs:
        err = m.error()
        if err is not None and err.code() != _EOF:
            raise InfrastructureError(f"restore read failed: {err}", retryable=err.retriable())
    return True
