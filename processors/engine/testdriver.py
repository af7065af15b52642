"""A broker-free test driver (Kafka Streams' TopologyTestDriver for runfacts applications).

It runs the application's handler through the same `Task` the engine uses (deserialize,
dead-letter policy, handler, write buffer, timers) and the same commit steps (changelog
records, delivery offsets, one atomic store write), with an in-memory log in place of Kafka
and a clock the test moves. Each `pipe` is one committed transaction; `abort_next_commit`
makes the next commit fail so the test sees the rollback and the re-processing;
`restart` rebuilds every partition from its changelog (optionally from an empty store).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any, NamedTuple

from runfacts.partitioning import partition_for
from runfacts.processors.engine.api import Application
from runfacts.processors.engine.commit import TransactionAborted, flush_changelogs
from runfacts.processors.engine.store import MemoryBackend, adopt_changelog, changelog_key
from runfacts.processors.engine.task import DeliveryCallback, OutHeaders, Task

Headers = list[tuple[str, bytes | None]] | None


class OutputRecord(NamedTuple):
    """A record the application emitted (or a changelog / dead-letter record)."""

    topic: str
    key: bytes | None
    value: bytes | None
    headers: Headers
    partition: int
    offset: int


class InputRecord(NamedTuple):
    """A record to pipe in: topic, key, value (+ optional headers, timestamp, partition)."""

    topic: str
    key: bytes | None
    value: bytes | None
    headers: Headers = None
    timestamp_ms: int | None = None
    partition: int | None = None


class _Message:
    """The `confluent_kafka.Message` accessors a Task reads."""

    __slots__ = ("_t", "_p", "_o", "_k", "_v", "_h", "_ts")

    def __init__(self, topic: str, partition: int, offset: int, key: bytes | None,
                 value: bytes | None, headers: Headers, ts: int) -> None:
        self._t, self._p, self._o, self._k, self._v, self._h, self._ts = (
            topic, partition, offset, key, value, headers, ts)

    def topic(self) -> str: return self._t  # noqa: E704
    def partition(self) -> int: return self._p  # noqa: E704
    def offset(self) -> int: return self._o  # noqa: E704
    def key(self) -> bytes | None: return self._k  # noqa: E704
    def value(self) -> bytes | None: return self._v  # noqa: E704
    def headers(self) -> Headers: return self._h  # noqa: E704
    def timestamp(self) -> tuple[int, int]: return (1, self._ts)  # noqa: E704
    def error(self) -> None: return None  # noqa: E704


class MemoryLog:
    """The driver's Kafka: a transactional in-memory log per topic-partition."""

    def __init__(self) -> None:
        self.logs: dict[tuple[str, int], list[OutputRecord]] = {}
        self._pending: list[tuple[str, Any, Any, Headers, int, DeliveryCallback | None]] = []

    def produce(self, topic: str, value: bytes | None = None, key: bytes | None = None,
                partition: int = -1, on_delivery: DeliveryCallback | None = None,
                timestamp: int = 0, headers: OutHeaders | None = None) -> None:
        copied = None if headers is None else list(headers)  # as Kafka does: later edits do not leak
        self._pending.append((topic, key, value, copied, partition, on_delivery))

    def backoff(self) -> None:
        """The in-memory queue is never full."""

    def flush(self, timeout: float = 0) -> int:
        """Nothing is sent before commit; delivery reports carry the offsets commit will use."""
        sizes: dict[tuple[str, int], int] = {}
        for topic, _k, _v, _h, partition, on_delivery in self._pending:
            tp = (topic, max(partition, 0))
            offset = len(self.logs.get(tp, ())) + sizes.get(tp, 0)
            sizes[tp] = sizes.get(tp, 0) + 1
            if on_delivery is not None:
                on_delivery(None, _Message(topic, tp[1], offset, None, None, None, 0))
        return 0

    def commit(self) -> None:
        for topic, key, value, headers, partition, _cb in self._pending:
            log = self.logs.setdefault((topic, max(partition, 0)), [])
            log.append(OutputRecord(topic, key, value, headers, partition, len(log)))
        self._pending.clear()

    def abort(self) -> None:
        self._pending.clear()


class TestDriver:
    """Pipe records through an application's handler without a broker."""

    __test__ = False  # not a pytest class

    def __init__(self, app: Application, *, partitions: int = 1, start_ms: int = 0) -> None:
        self.app = app
        self.partitions = partitions
        self.now_ms = start_ms
        self.log = MemoryLog()
        self._input_offsets: dict[tuple[str, int], int] = {}
        self._aborts_pending = 0
        self.backends = {p: MemoryBackend(app.all_stores) for p in range(partitions)}
        self.tasks = {p: Task(app, p, b, self.log, partitions=partitions) for p, b in self.backends.items()}

    def pipe(self, topic: str, value: bytes | None, key: bytes | None = None, **kw: Any) -> None:
        """Process one record in its own transaction."""
        self.pipe_batch([InputRecord(topic, key, value, **kw)])

    def pipe_batch(self, records: Iterable[InputRecord]) -> None:
        """Process records in ONE transaction (like one consumed batch of the engine)."""
        msgs = [self._message(r) for r in records]

        def process() -> None:
            for m in msgs:
                self.tasks[m.partition()].process(m)
        self._transaction(process)

    def advance(self, ms: int) -> int:
        """Move the clock and fire the timers now due, in one transaction; returns how many."""
        self.now_ms += ms
        fired = [0]

        def fire() -> None:
            fired[0] = sum(t.fire_timers(self.now_ms, 1 << 30) for t in self.tasks.values())
        self._transaction(fire)
        return fired[0]

    def abort_next_commit(self, times: int = 1) -> None:
        """Make the next `times` commits fail after the changelog flush (then roll back, retry)."""
        self._aborts_pending += times

    def _message(self, r: InputRecord) -> _Message:
        self.app.source(r.topic)
        partition = r.partition if r.partition is not None else self._partition_of(r.key)
        offset = self._input_offsets.get((r.topic, partition), 0)
        self._input_offsets[(r.topic, partition)] = offset + 1
        ts = self.now_ms if r.timestamp_ms is None else r.timestamp_ms
        return _Message(r.topic, partition, offset, r.key, r.value, r.headers, ts)

    def _partition_of(self, key: bytes | None) -> int:
        return 0 if not key else partition_for(key, self.partitions)  # the producers' murmur2

    def _transaction(self, step: Callable[[], object]) -> None:
        """The engine's steps minus Kafka: process, then commit or roll back and replay."""
        while True:
            try:
                step()
            except BaseException:
                self._rollback()
                raise
            try:
                self._commit()
                return
            except TransactionAborted:
                self._rollback()

    def _commit(self) -> None:
        tasks = [t for t in self.tasks.values() if t.has_work()]
        flush_changelogs(self.log, tasks)  # type: ignore[arg-type]
        if self._aborts_pending:
            self._aborts_pending -= 1
            raise TransactionAborted("aborted by abort_next_commit()")
        self.log.commit()
        for task in tasks:
            task.write()

    def _rollback(self) -> None:
        self.log.abort()
        for task in self.tasks.values():
            task.rollback()

    def outputs(self, topic: str | None = None) -> list[OutputRecord]:
        """Committed records of `topic` (default: every non-changelog topic), in commit order."""
        found = [r for (t, _p), log in self.log.logs.items() for r in log
                 if (t == topic if topic else not t.endswith("-changelog"))]
        return found

    def dead_letters(self) -> list[OutputRecord]:
        return self.outputs(self.app.dead_letter_topic)

    def read_store(self, store: str, partition: int | None = None) -> dict[bytes, bytes]:
        """The committed contents of `store` (all partitions merged unless one is named)."""
        parts = [partition] if partition is not None else list(self.backends)
        merged: dict[bytes, bytes] = {}
        for p in parts:
            merged.update(self.backends[p].data[store])
        return merged

    def restart(self, *, lose_state: bool = False, app: Application | None = None) -> int:
        """Re-open every partition (from an empty store with lose_state) and restore; returns
        the number of changelog records applied. `app`: run another version of the application
        from now on (an upgrade: e.g. one that moved a store's changelog)."""
        if app is not None:
            self.app = app
        restored = 0
        for p in range(self.partitions):
            if lose_state:
                self.backends[p] = MemoryBackend(self.app.all_stores)
            restored += self._restore(p, self.backends[p])
            self.tasks[p] = Task(self.app, p, self.backends[p], self.log, partitions=self.partitions)
        return restored

    def _restore(self, partition: int, backend: MemoryBackend) -> int:
        count = 0
        for store in self.app.all_stores:
            topic = self.app.changelog_topic(store)
            adopt_changelog(backend, store, topic, self.app.default_changelog_topic(store))
            log = self.log.logs.get((topic, partition), [])
            stored = int(backend.meta().get(changelog_key(store), b"-1"))
            todo = [_Message(r.topic, partition, r.offset, r.key, r.value, None, 0)
                    for r in log[stored + 1:]]
            if todo:
                backend.restore(store, todo)
                count += len(todo)
        return count
