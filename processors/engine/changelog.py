"""Changelog topics: creation at start-up and restore of a partition's stores before processing.

Restore of the stores of newly assigned partitions (store by store, all partitions at once):
  1. ask the end of each changelog partition: its HIGH watermark (a read_uncommitted query),
     not its last stable offset (LSO). An open transaction of another instance (a dead or
     paused one) pins the LSO until its transaction.timeout.ms; records committed after it
     (by the instances that owned the partition since) lie between the LSO and the high
     watermark, and a restore that stopped at the LSO would silently lose them;
  2. start after the changelog offset the store already reflects (records already in the
     store are skipped by offset). A store claiming an offset at or beyond the high watermark
     belongs to another changelog (recreated topic, wrong cluster): refused with an error
     naming the topic and the offsets, never silently wiped;
  3. consume (read_committed: records of an open or aborted transaction are never restored)
     until the position passes the high watermark, that is until the LSO passed it too: while
     an open transaction pins the LSO below it, the restore waits (logged with both offsets),
     at most restore_timeout_s. Each batch is ONE WriteBatch holding its records and the
     batch's last changelog offset, so a crash mid-restore (crash point engine.mid_restore)
     resumes from the last written batch (batches are logged writes: RocksBackend.apply).
"""

from __future__ import annotations

import gc
import logging
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from itertools import groupby
from typing import Any, cast

from confluent_kafka import Consumer, KafkaError, KafkaException, Message, TopicPartition
from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic

from runfacts.crashpoints import crash_point
from runfacts.logread import watermarks
from runfacts.processors.engine.api import Application
from runfacts.processors.engine.settings import EngineSettings, common_config, restore_config
from runfacts.processors.engine.store import Backend, adopt_changelog, changelog_key
from runfacts.schemas.errors import ConfigError, InfrastructureError
from runfacts.topics import wait_ready

log = logging.getLogger("runfacts.engine")
_EOF = KafkaError._PARTITION_EOF
_error = Message.error
# A data message (error events are filtered out before grouping) always has a partition.
_partition = cast("Callable[[Message], int]", Message.partition)


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
    shared = app.changelogs
    if shared:
        described = _configs(admin, [t for t in shared.values() if t in meta])
        for store, topic in shared.items():
            check_shared_changelog(store, topic, len(meta[topic].partitions) if topic in meta else None,
                                   partitions, described.get(topic, {}))
    missing = []
    for store in app.all_stores:
        topic = app.changelog_topic(store)
        if store in shared:
            continue
        if topic in meta:
            if _partitions(meta, topic, "changelog") != partitions:
                raise ConfigError("changelog", topic, f"must have {partitions} partitions")
        else:
            missing.append(NewTopic(topic, partitions, settings.changelog_replication_factor,
                                    config={"cleanup.policy": "compact"}))
    _create(admin, missing)
    return partitions


def check_shared_changelog(store: str, topic: str, found: int | None, partitions: int,
                           configs: dict[str, str]) -> None:
    """Refuse a store's shared changelog topic (`Application.changelogs`) that would lose or
    misplace state: missing (`found` None: the engine never creates an application's topic),
    not compacted, with time or size retention, or another partition count than the sources'."""
    setting = f"changelog of store {store}"
    if found is None:
        raise ConfigError(setting, topic, "topic does not exist: create it with `runfacts topics "
                          "apply` (compacted, retention.ms=-1, the sources' partition count)")
    if found != partitions:
        raise ConfigError(setting, topic, f"has {found} partitions, the sources {partitions}: a "
                          f"store partition restores from the same partition of its changelog; "
                          f"recreate the topic with {partitions} partitions")
    policy = {p.strip() for p in configs.get("cleanup.policy", "delete").split(",")}
    if "compact" not in policy:
        raise ConfigError(setting, topic, f"has cleanup.policy={configs.get('cleanup.policy', 'delete')}: "
                          f"a changelog must be compacted; set cleanup.policy=compact "
                          f"(kafka-configs --alter --add-config cleanup.policy=compact)")
    if "delete" in policy:
        for name in ("retention.ms", "retention.bytes"):
            if configs.get(name, "-1") != "-1":
                raise ConfigError(setting, topic, f"has cleanup.policy=compact,delete with "
                                  f"{name}={configs[name]}: old states would be deleted; set "
                                  f"cleanup.policy=compact or {name}=-1")


def _configs(admin: AdminClient, topics: list[str]) -> dict[str, dict[str, str]]:
    """The effective configs of `topics`."""
    if not topics:
        return {}
    resources = [ConfigResource(ConfigResource.Type.TOPIC, t) for t in topics]
    found = {}
    for resource, future in admin.describe_configs(resources, request_timeout=30).items():
        try:
            entries = future.result()
        except KafkaException as exc:
            raise InfrastructureError(f"cannot read the configs of {resource.name}: {exc}",
                                      retryable=True) from exc
        found[resource.name] = {k: v.value for k, v in entries.items() if v.value is not None}
    return found


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
    wait_ready(admin, [t.topic for t in topics], timeout=60)


class Restorer:
    """Brings partitions' stores up to the end of their changelogs, all partitions at once."""

    def __init__(self, app: Application, settings: EngineSettings) -> None:
        self._app = app
        self._settings = settings
        self._consumer: Consumer | None = None
        self._ends: Consumer | None = None

    def restore(self, backends: dict[int, Backend]) -> int:
        """Restore every store of every given partition; returns the records applied."""
        with _gc_paused():
            return sum(self._restore_store(store, backends) for store in self._app.all_stores)

    def _restore_store(self, store: str, backends: dict[int, Backend]) -> int:
        consumer = self._client()
        todo = {}
        for partition, backend in backends.items():
            tp, end = self._start(consumer, partition, backend, store)
            if tp is not None:
                todo[partition] = (tp, end, backend)
        if not todo:
            return 0
        consumer.assign([tp for tp, *_ in todo.values()])
        try:
            count = self._consume(consumer, store, todo)
        finally:
            consumer.unassign()
        log.info("restored %d records of store %s into partitions %s",
                 count, store, sorted(todo))
        return count

    def _start(self, consumer: Consumer, partition: int, backend: Backend,
               store: str) -> tuple[TopicPartition | None, int]:
        """Steps 1-2: where to start reading (None: the store is current) and the end."""
        topic = self._app.changelog_topic(store)
        if adopt_changelog(backend, store, topic, self._app.default_changelog_topic(store)):
            log.warning("store %s[%d]: its changelog moved to %s; the offset it held refers to "
                        "the old topic, so it is rebuilt from offset 0 of %s", store, partition,
                        topic, topic)
        low, high = watermarks(self._end_client(), TopicPartition(topic, partition))
        stored = int(backend.meta().get(changelog_key(store), b"-1"))
        if stored >= high:
            where = getattr(backend, "path", None)
            raise InfrastructureError(
                f"store {store}[{partition}]{f' at {where}' if where else ''} reflects changelog "
                f"{topic}[{partition}] up to offset {stored}, but that changelog ends at offset "
                f"{high} (high watermark; low {low}): a recreated topic or another cluster. Point "
                f"the engine at the cluster holding this changelog, or delete the partition's "
                f"state directory to rebuild it from this one", retryable=False)
        start = max(stored + 1, low)
        return (TopicPartition(topic, partition, start) if start < high else None), high

    def _consume(self, consumer: Consumer, store: str, todo: dict[int, tuple]) -> int:
        """Step 3: batches until every changelog partition of `store` reached its high
        watermark. Writes run on writer threads (RocksDB releases the GIL) while the next batch
        is read; each partition keeps one write in flight, so its batches land in changelog
        order. An end-of-partition event comes at the LSO: below the high watermark, an open
        transaction holds the rest back, and the restore waits for it to end."""
        count = 0
        pending = set(todo)
        started = time.monotonic()
        deadline = started + self._settings.restore_timeout_s
        held: dict[int, int] = {}  # partition -> the LSO its last end-of-partition event reported
        next_log = started
        writing: dict[int, Future] = {}
        with ThreadPoolExecutor(2, thread_name_prefix="restore") as writers:
            while pending:
                data = msgs = consumer.consume(self._settings.restore_batch, 0.05)
                if any(map(_error, msgs)):  # rare: end-of-partition events (or errors) among them
                    data = [m for m in msgs if m.error() is None]
                    for msg in msgs:
                        if _is_eof(msg):  # at the LSO: done once that passed the end
                            eof, reached = _partition(msg), cast(int, msg.offset())
                            if reached >= todo[eof][1]:
                                pending.discard(eof)
                                held.pop(eof, None)
                            else:
                                held[eof] = reached
                for partition, run in groupby(data, key=_partition):
                    batch = list(run)
                    _, end, backend = todo[partition]
                    prepared = backend.prepare(store, batch)
                    _written(writing.pop(partition, None))
                    writing[partition] = writers.submit(backend.apply, prepared)
                    count += len(batch)
                    if batch[-1].offset() >= end - 1:
                        pending.discard(partition)
                        held.pop(partition, None)
                now = time.monotonic()
                if held and pending and now >= next_log:
                    log.warning("restore of store %s waits for open transactions: %s (records "
                                "committed after them are restored once they end, at the latest "
                                "at the transaction.timeout.ms of the producer that opened them)",
                                store, _held(store, todo, held))
                    next_log = now + 5.0
                if pending and now > deadline:
                    why = (f"; open transactions pin the changelog: {_held(store, todo, held)}"
                           if held else "")
                    raise InfrastructureError(f"restore of {store} {sorted(pending)} did not "
                                              f"finish in {self._settings.restore_timeout_s}s{why}",
                                              retryable=True)
            for write in writing.values():
                _written(write)
        if held or time.monotonic() - started > 5.0:
            log.info("restore of store %s took %.1fs", store, time.monotonic() - started)
        return count

    def _client(self) -> Consumer:
        if self._consumer is None:
            self._consumer = Consumer(restore_config(self._app, self._settings))
        return self._consumer

    def _end_client(self) -> Consumer:
        """The consumer that reads high watermarks: read_uncommitted, so its ListOffsets answers
        the high watermark (a read_committed one answers the LSO); it never consumes."""
        if self._ends is None:
            self._ends = Consumer({**restore_config(self._app, self._settings),
                                   "isolation.level": "read_uncommitted"})
        return self._ends

    def close(self) -> None:
        for consumer in (self._consumer, self._ends):
            if consumer is not None:
                consumer.close()
        self._consumer = self._ends = None


@contextmanager
def _gc_paused() -> Iterator[None]:
    """No cyclic garbage collection while restoring: every consumed batch allocates thousands of
    (GC-tracked, acyclic) messages that would trigger collections of everything alive."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def _held(store: str, todo: dict[int, tuple], held: dict[int, int]) -> str:
    """Each waiting partition's changelog, the LSO it is read up to and its high watermark."""
    return ", ".join(f"{todo[p][0].topic}[{p}] readable up to {lso} (last stable offset) of "
                     f"{todo[p][1]} (high watermark)" for p, lso in sorted(held.items()))


def _written(write: Future | None) -> None:
    """Wait for a restore batch's write (re-raising its error)."""
    if write is not None:
        write.result()
        crash_point("engine.mid_restore")


def _is_eof(msg: Any) -> bool:
    """True for an end-of-partition event; raises on any other consumer error."""
    err = msg.error()
    if err is None:
        return False
    if err.code() != _EOF:
        raise InfrastructureError(f"restore read failed: {err}", retryable=err.retriable())
    return True

