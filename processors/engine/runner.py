"""The Kafka shell: runs an Application with rocksdict stores, changelogs, timers and transactions.

One loop iteration:
  1. consume up to consume_batch records (`runfacts.logread.consume_ready`: the first record, or a
     timer falling due, ends the wait of at most poll_timeout_ms; then only what is already
     fetched). Rebalance callbacks run inside this call:
     on revoke, commit the open transaction (or abort and roll back) and close the stores;
     on assign, open each partition's RocksDB and restore it from its changelogs BEFORE the
     partition is handed to the consumer, starting after the store's input offset when the
     group offset is behind it (at-least-once: a crash before the offset commit; exactly-once:
     group offsets lost or reset while the store is intact).
       -- crash point engine.during_rebalance (on revoke, before its commit)
       -- crash point engine.after_consume_before_process
  2. begin a transaction (exactly-once) if none is open.
  3. per record: deserialize with the source's deserializers (InvalidInput -> dead-letter
     topic with topic/partition/offset/schema/error headers, or stop, per source); run the
     handler; its outputs go to the producer inside the transaction, its store writes into
     the partition's write buffer.
  4. every timer_interval_ms, and when the earliest timer falls due: fire due timers through the
     same steps 2-3.
  5. commit when commit_interval_ms has passed since the previous commit began (Kafka
     Streams' commit.interval.ms: a record waits at most about one interval plus one commit,
     not an interval after a slow commit ended), commit_every records are in the
     transaction, or (commit_on_idle) the input is drained (the consume brought nothing in
     poll_timeout_ms: nothing is left to batch with, so waiting would only add latency) or
     caught up (the consume brought less than a full batch: the engine keeps up, so the
     transaction commits once commit_interval_caught_up_ms old; under a backlog every consume
     is full and the longer interval batches for throughput). A quiet transaction (no output
     sent and nothing in a handler's batch: nobody reads anything of it) waits for the
     interval even when caught up (defer_quiet_commits): its store writes and offsets matter
     only to a restart, and the next record's outputs commit with it. The commit steps and the
     crash analysis: runfacts.processors.engine.commit.
A `TransactionAborted` aborts, discards the write buffers, seeks back to the transaction's
first offsets and goes on (at most max_consecutive_aborts in a row, with backoff). A handler
error aborts, discards and stops with a `ProcessingError` naming the record: no retry loop.
One exception: a stored record written by a newer runfacts (`versions.NewerStoredVersion`, on a
record or a timer) halts only its partition: the batch is aborted and rolled back, the partition
is paused (its records and timers wait, its offsets stay where they were committed) and named in
`Engine.halted`, the log and the gauge `runfacts.engine.halted_partitions`; the other partitions
go on. The fix is to upgrade this process; an upgraded instance that takes the partition over
resumes it from its last commit. (A crash loop stopped every partition for one record.)
SIGTERM / SIGINT / stop(): finish the batch, commit, close the stores, leave the group.
Telemetry (when enabled): records processed, transaction commit latency, and consumer lag
per partition from librdkafka's statistics. Metrics (when the application names a metrics topic
and `metrics_interval_ms` > 0): every interval one record of commit latency p50/p99/max, batch
sizes and the lag the consumer knows, off the transaction (`MetricsReporter`).
"""

from __future__ import annotations

import logging
import signal
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from itertools import groupby
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, Message, Producer, TopicPartition

from runfacts import telemetry
from runfacts.crashpoints import crash_point
from runfacts.logread import consume_ready
from runfacts.metrics import MetricsWindow, encode
from runfacts.partitioning import pin_partitioner
from runfacts.processors.engine.api import Application
from runfacts.processors.engine.changelog import Restorer, prepare_topics
from runfacts.processors.engine.commit import FENCED, AtLeastOnce, ExactlyOnce, ProducerFenced, TransactionAborted
from runfacts.processors.engine.gctune import HeapTrimmer, limit_arenas, tune_gc
from runfacts.processors.engine.settings import (
    EngineSettings,
    check_timeouts,
    commit_due,
    common_config,
    consumer_config,
    load_settings,
    producer_config,
    with_instance_id,
)
from runfacts.processors.engine.store import RocksBackend, StoreMemory
from runfacts.processors.engine.task import Task
from runfacts.processors.engine.versions import NewerStoredVersion
from runfacts.schemas.errors import InfrastructureError

log = logging.getLogger("runfacts.engine")
_WARN_EVERY_S = 60.0


@dataclass
class EngineStats:
    """Counters for tests, benchmarks and health checks."""

    processed: int = 0
    commits: int = 0
    aborts: int = 0
    restored: int = 0
    timers_fired: int = 0
    producers_renewed: int = 0
    halts: int = 0


HALTED_METRIC = "runfacts.engine.halted_partitions"
"""Gauge: partitions this instance holds halted (a stored record newer than its code)."""


class PartitionHalted(Exception):
    """A partition's record or timer met a stored record written by a newer runfacts."""

    def __init__(self, partition: int, cause: Exception, newer: NewerStoredVersion) -> None:
        self.partition, self.cause, self.newer = partition, cause, newer
        super().__init__(f"partition {partition}: {cause}")


def newer_stored(exc: BaseException | None) -> NewerStoredVersion | None:
    """The `NewerStoredVersion` behind `exc` (itself, or along its causes), if any."""
    while exc is not None:
        if isinstance(exc, NewerStoredVersion):
            return exc
        exc = exc.__cause__
    return None


class ProducerOutput:
    """The tasks' output: the producer's own `produce`, plus a back-off when its queue is full."""

    # librdkafka takes any list of (str, bytes | None) headers; confluent's stub wants exactly
    # list[tuple[str, str | bytes | None]] (invariant), which no narrower list matches.
    produce: Callable[..., None]

    def __init__(self, producer: Producer) -> None:
        self.produce = producer.produce
        self._producer = producer

    def backoff(self) -> None:
        self._producer.poll(0.1)


class Engine:
    """Runs one instance of an application; see the module docstring for the loop."""

    def __init__(self, app: Application, settings: EngineSettings | None = None,
                 *, clock: Callable[[], float] = time.time) -> None:
        self.app = app
        self.settings = with_instance_id(settings or load_settings())
        check_timeouts(self.settings)  # settings built directly skip load_settings' check
        self.stats = EngineStats()
        self._clock = clock
        self._tasks: dict[int, Task] = {}
        self._stopping = False
        self._failure: BaseException | None = None
        self._uncommitted = 0
        self._last_commit = 0.0
        self._aborts_in_row = 0
        self._tel = telemetry.current()
        self._labels = {"app": app.name}
        # one bound for every partition's RocksDB of this instance (None: RocksDB's defaults)
        memory = self.settings.store_memory_mb
        self._store_memory = StoreMemory(memory) if memory else None
        self._metrics: MetricsReporter | None = None
        self._partition_count: int | None = None
        self.halted: dict[int, str] = {}
        """Partitions halted on a stored record newer than this code -> why (see the module docstring)."""

    def stop(self) -> None:
        """Ask the loop to finish its batch, commit and return (safe from signals and threads)."""
        self._stopping = True

    @property
    def partitions(self) -> list[int]:
        """The partitions this instance owns right now."""
        return sorted(self._tasks)

    def run(self) -> None:
        """Run until stop() or SIGTERM; raises ProcessingError / InfrastructureError on failure."""
        self._partition_count = prepare_topics(self.app, self.settings)  # handlers see it (ctx.partitions)
        tune_gc(self.settings.gc_threshold)
        limit_arenas(self.settings.malloc_arena_max)
        trimmer = HeapTrimmer(self.settings.heap_trim_interval_ms / 1000)
        try:
            self._connect()
            with _signals(self.stop):
                self._loop()
        except BaseException as exc:
            # diagnose before aborting: the abort ends the transaction whose age tells a pause past
            # the transaction timeout from another process with this instance id
            diagnosis = self._fenced(exc) if self._is_fencing(exc) else self._timed_out(exc)
            self._fail(exc)
            if diagnosis is not None:
                raise diagnosis from exc
            raise
        finally:
            trimmer.stop()
            self._close()

    def _connect(self) -> None:
        settings = self.settings
        self._restorer = Restorer(self.app, settings)
        cconf = consumer_config(self.app, settings)
        if self._tel.enabled:
            cconf.setdefault("statistics.interval.ms", 5000)
            cconf["stats_cb"] = self._on_stats
        self._consumer = Consumer(cconf)
        pconf = producer_config(self.app, settings)
        if settings.exactly_once:
            self._txn: ExactlyOnce | AtLeastOnce = ExactlyOnce(self._consumer,
                                                                    settings.transaction_call_timeout_ms / 1000)
        else:
            self._txn = AtLeastOnce(self._consumer)
            pconf["on_delivery"] = self._txn.on_delivery
        self._pconf = pconf
        self._producer = self._txn.producer = Producer(pconf)
        self._out = ProducerOutput(self._producer)
        self._txn.init()
        if self.app.metrics_topic and settings.metrics_interval_ms > 0:
            self._metrics = MetricsReporter(self.app.name, settings.instance_id, self.app.metrics_topic,
                                            settings.metrics_interval_ms, common_config(settings))
        self._consumer.subscribe([s.topic for s in self.app.sources], on_assign=self._on_assign,
                                 on_revoke=self._on_revoke, on_lost=self._on_lost)

    def _loop(self) -> None:
        s = self.settings
        timeout = s.poll_timeout_ms / 1000
        next_timers = 0.0
        self._last_commit = time.monotonic()  # the first commit, too, waits one interval (Kafka Streams)
        while not self._stopping:
            # the first record ends the wait (and a timer falling due first); a backlog still comes in full batches
            wait = min(timeout, max(0.0, next_timers - time.monotonic()))
            msgs = consume_ready(self._consumer, s.consume_batch, wait)
            if self._failure is not None:
                raise self._failure
            if msgs:
                crash_point("engine.after_consume_before_process")
                self._begin()
                if not self._halting(self._process, msgs):
                    continue
                crash_point("engine.in_transaction")  # a batch processed, its transaction open
            now = time.monotonic()
            if now >= next_timers:
                if not self._halting(self._fire_timers):
                    continue
                next_timers = now + s.timer_interval_ms / 1000
            next_timers = min(next_timers, self._timer_due_at(now))
            if self._uncommitted and commit_due(s, self._uncommitted, len(msgs), now - self._last_commit,
                                                all(t.quiet() for t in self._tasks.values())):
                self._commit()
            if self._metrics is not None and now >= self._metrics.next_at:
                self._metrics.publish(self._consumer, self._tasks, [src.topic for src in self.app.sources],
                                      self.halted)
        self._commit()

    def _begin(self) -> None:
        if not self._txn.open:
            self._txn.begin()

    def _process(self, msgs: list[Any]) -> None:
        """Step 3: each run of consecutive messages of one partition goes to its Task in one call."""
        tasks, halted = self._tasks, self.halted
        for partition, run in groupby(msgs, _partition):
            batch = list(run)
            if partition in halted:  # fetched before the pause took effect: left for the next owner
                continue
            task = tasks.get(partition)  # type: ignore[arg-type]  # None (error events) finds no task
            try:
                if task is not None and not any(map(_error, batch)):
                    task.process_batch(batch)
                else:
                    self._unowned_or_errors(batch)
            except Exception as exc:
                newer = newer_stored(exc)
                if newer is None or partition is None:
                    raise
                raise PartitionHalted(partition, exc, newer) from exc
        self._uncommitted += len(msgs)
        self.stats.processed += len(msgs)
        if self._metrics is not None:
            self._metrics.window.batch(len(msgs))
        if self._tel.enabled:
            self._tel.add(telemetry.EVENTS_PROCESSED, len(msgs), self._labels)

    def _unowned_or_errors(self, msgs: list[Any]) -> None:
        """Error events in between data messages; a data message of a partition this instance
        does not own (never expected: revoked partitions' queues are purged) is an error."""
        for msg in msgs:
            if msg.error() is not None:
                self._consume_error(msg.error())
            elif msg.partition() in self._tasks:
                self._tasks[msg.partition()].process(msg)
            else:
                raise InfrastructureError(f"consumed {msg.topic()}[{msg.partition()}]@{msg.offset()} "
                                          f"of a partition not assigned to this instance", retryable=True)

    def _on_stats(self, stats_json: str) -> None:
        for topic, partition, lag in telemetry.lag_from_stats(stats_json):
            self._tel.gauge(telemetry.CONSUMER_LAG, lag, {**self._labels, "topic": topic, "partition": partition})

    def _consume_error(self, err: KafkaError) -> None:
        consume_error(err)

    def _timer_due_at(self, now: float) -> float:
        """When (on the monotonic clock of `now`) the earliest timer of any partition falls due:
        a timer set to fire sooner than the next `timer_interval_ms` check fires at its time (the
        dispatcher's look at a call it started, 10 ms on, waited up to the 100 ms interval)."""
        dues = [due for task in self._tasks.values()
                if task.partition not in self.halted and (due := task.timers.next_due()) is not None]
        if not dues:
            return float("inf")
        return now + max(0.0, min(dues) / 1000 - self._clock())

    def _halting(self, step: Callable[..., None], *args: Any) -> bool:
        """Run `step`; False when it halted a partition (the batch was rolled back: start over)."""
        try:
            step(*args)
        except PartitionHalted as halt:
            self._halt(halt)
            return False
        return True

    def _halt(self, halt: PartitionHalted) -> None:
        """Abort and roll the batch back, then pause the partition: its records and timers wait."""
        why = (f"{self.app.name} partition {halt.partition} halted: {halt.cause}. Its runs wait (nothing of "
               "the batch committed; its offsets stay at the last commit) while the other partitions go on; "
               "upgrade this process (or let an upgraded instance take the partition over) and it resumes "
               "from there")
        log.error("%s", why)
        self._rollback(halt.cause)
        self._aborts_in_row = 0  # not a transient abort: no back-off towards giving up
        self.halted[halt.partition] = why
        self.stats.halts += 1
        self._consumer.pause([TopicPartition(src.topic, halt.partition) for src in self.app.sources])
        self._tel.gauge(HALTED_METRIC, len(self.halted), self._labels)
        if self._metrics is not None:  # the console's health page names it at the next loop, not an interval later
            self._metrics.next_at = 0.0

    def _fire_timers(self) -> None:
        now_ms = int(self._clock() * 1000)
        for task in list(self._tasks.values()):
            if task.partition in self.halted:
                continue
            due = task.timers.next_due()
            if due is not None and due <= now_ms:
                self._begin()
                try:
                    fired = task.fire_timers(now_ms, self.settings.timer_batch)
                except Exception as exc:
                    newer = newer_stored(exc)
                    if newer is None:
                        raise
                    raise PartitionHalted(task.partition, exc, newer) from exc
                self._uncommitted += fired
                self.stats.timers_fired += fired

    def _commit(self, revoked: frozenset[int] = frozenset()) -> None:
        if not self._txn.open:
            return
        tasks = [t for t in self._tasks.values() if t.has_work()]
        started = self._last_commit = time.monotonic()
        try:
            self._txn.commit(tasks)
        except TransactionAborted as exc:
            self._rollback(exc, revoked)
            return
        except InfrastructureError as exc:  # a timed-out commit: roll back on a new producer
            if not self._renewing() or self._txn.wedged:  # type: ignore[union-attr]
                raise
            if getattr(exc, "step", "") == "commit_transaction" and self._landed(tasks, exc):
                self._finish_landed(tasks)
                return
            self._rollback(exc, revoked)
            return
        latency_ms = (time.monotonic() - started) * 1000
        if self._metrics is not None:
            self._metrics.window.commit(latency_ms)
        if self._tel.enabled:
            self._tel.record(telemetry.COMMIT_LATENCY, latency_ms, self._labels)
        self._uncommitted = 0
        self._aborts_in_row = 0
        self.stats.commits += 1

    def _landed(self, tasks: list[Task], exc: InfrastructureError) -> bool:
        """Whether a commit_transaction that timed out committed after all: its EndTxn may have
        reached the coordinator while every answer was lost. The producer is replaced first (its
        init_transactions waits until the coordinator has finished the old transaction, either
        way, and fences the old producer); then the group's committed offsets tell: the batch's
        end offsets, it committed; its first offsets, it aborted. A batch without input offsets
        (timers only) cannot tell: the engine stops (retryable) and the restart restores the
        stores from their changelogs, which hold the batch only if it committed."""
        wanted = {(topic, t.partition): offset for t in tasks for topic, offset in t.offsets_to_commit().items()}
        self._txn.open = False  # the old producer's transaction is not ours to end any more
        self._renew_producer()
        if not wanted:
            raise InfrastructureError(f"a commit timed out ({exc}) in a batch without input offsets, so whether "
                                      "it landed cannot be told; restart to restore the stores from their "
                                      "changelogs", retryable=True) from exc
        asked = [TopicPartition(topic, partition) for topic, partition in wanted]
        got = {(tp.topic, tp.partition): tp.offset for tp in self._consumer.committed(asked, 30.0)}
        landed = [key for key, offset in wanted.items() if got.get(key) == offset]
        if landed and len(landed) != len(wanted):
            raise InfrastructureError(f"a timed-out commit landed for {sorted(landed)} but not for the rest of "
                                      f"its batch ({got}); restart to restore from the changelogs",
                                      retryable=True) from exc
        log.warning("a commit timed out (%s); after replacing the producer the group's offsets say it %s",
                    exc, "committed: finishing the batch" if landed else "did not commit: rolling back")
        return bool(landed)

    def _finish_landed(self, tasks: list[Task]) -> None:
        """The rest of a commit that landed although the client timed out: the store writes."""
        for task in tasks:
            task.write()
        self._uncommitted = 0
        self._aborts_in_row = 0
        self.stats.commits += 1

    def _rollback(self, exc: Exception, revoked: frozenset[int] = frozenset()) -> None:
        """Abort, discard every write buffer and seek the kept partitions back."""
        log.warning("transaction aborted, rolling back: %s", exc)
        try:
            self._txn.abort()
        except InfrastructureError as abort_exc:
            if not self._renewing():
                raise
            log.warning("abort failed too (%s): the new producer's init_transactions aborts it", abort_exc)
        for task in self._tasks.values():
            rewind = task.rollback()
            if task.partition not in revoked:
                for topic, offset in rewind.items():
                    self._consumer.seek(TopicPartition(topic, task.partition, offset))
        if self._renewing():
            self._renew_producer()
        self._uncommitted = 0
        self.stats.aborts += 1
        self._aborts_in_row += 1
        if self._aborts_in_row >= self.settings.max_consecutive_aborts:
            raise InfrastructureError(f"{self._aborts_in_row} transactions in a row aborted; "
                                      f"last: {exc}", retryable=True) from exc
        time.sleep(min(0.1 * 2 ** self._aborts_in_row, 5.0))

    def _is_fencing(self, exc: BaseException) -> bool:
        """The failure is this producer being fenced: said so (`ProducerFenced`), or a fatal or
        bad-state producer error (librdkafka reports a fencing seen by a produce as `_FATAL`, or
        `_STATE` once the coordinator aborted the transaction) that the producer's next
        transactional call names as a fencing."""
        if isinstance(exc, ProducerFenced):
            return True
        kafka = exc if isinstance(exc, KafkaException) else exc.__cause__  # a handler's produce failed
        code = (kafka.args[0].code() if isinstance(kafka, KafkaException) and kafka.args
                else getattr(exc, "code", None))
        if code in FENCED:
            return True
        if code not in (KafkaError._FATAL, KafkaError._STATE) or not self.settings.exactly_once \
                or not hasattr(self, "_producer"):
            return False
        try:
            self._producer.abort_transaction(1)
        except KafkaException as probe:
            return bool(probe.args) and probe.args[0].code() in FENCED
        return False

    def _timed_out(self, exc: BaseException) -> InfrastructureError | None:
        """A producer error met with a transaction open past its timeout (not a fencing): the client
        timed the transaction out itself (librdkafka: "message(s) timed out ... requires epoch bump",
        then every produce fails in a bad state) before it heard of the broker's abort. Named as the
        pause or starvation it is, not as a broker that might be down."""
        txn = getattr(self, "_txn", None)
        open_s = txn.open_for() if isinstance(txn, ExactlyOnce) else 0.0
        kafka = exc if isinstance(exc, KafkaException) else exc.__cause__
        if open_s * 1000 < self.settings.transaction_timeout_ms or not isinstance(kafka, KafkaException):
            return None
        tid = self._pconf.get("transactional.id") if hasattr(self, "_pconf") else self.settings.instance_id
        return InfrastructureError(
            f"producer {tid}: a transaction open for {open_s:.1f} s, past its transaction timeout "
            f"(RUNFACTS_TRANSACTION_TIMEOUT_MS={self.settings.transaction_timeout_ms}), failed: a starved, paused "
            f"or overloaded process; nothing of it was committed; a restart resumes from the last commit ({exc})",
            retryable=True)

    def _fenced(self, exc: BaseException) -> ProducerFenced:
        """Name the cause: a restart of this instance elsewhere (once), two live instances sharing
        one id (fenced again and again: each start fences the other), or a transaction left open past
        its timeout (the broker aborted it)."""
        settings = self.settings
        self._tel.add(FENCED_METRIC, 1, self._labels)
        tid = self._pconf.get("transactional.id") if hasattr(self, "_pconf") else settings.instance_id
        txn = getattr(self, "_txn", None)
        open_s = txn.open_for() if isinstance(txn, ExactlyOnce) else 0.0
        if open_s * 1000 >= settings.transaction_timeout_ms:
            # the coordinator aborts a transaction open past its timeout and bumps the epoch: the
            # producer then reads as fenced although no other process holds the id (not counted
            # towards the two-instances loop)
            return ProducerFenced(
                f"producer {tid} fenced with a transaction open for {open_s:.1f} s, past its transaction "
                f"timeout (RUNFACTS_TRANSACTION_TIMEOUT_MS={settings.transaction_timeout_ms}): the broker "
                "aborted the open transaction (a starved, paused or overloaded process; nothing of it was "
                f"committed); this one stops and a restart resumes from the last commit ({exc})")
        count = note_fencing(settings.state_dir / FENCINGS_FILE, self._clock(), FENCING_WINDOW_S)
        if count >= FENCING_LOOP:
            message = (f"producer {tid} fenced {count} times in {FENCING_WINDOW_S // 60} minutes: two live "
                       f"instances share the instance id {settings.instance_id!r} and fence each other in a "
                       "loop; give each its own RUNFACTS_INSTANCE_ID (or its own state dir)")
            log.error("%s", message)
        else:
            message = (f"producer {tid} fenced: another process started with this instance id "
                       f"{settings.instance_id!r} (a restart of this instance, or a second instance "
                       f"sharing the id); this one stops ({exc})")
        return ProducerFenced(message)

    def _renewing(self) -> bool:
        return isinstance(self._txn, ExactlyOnce) and self._txn.renew

    def _renew_producer(self) -> None:
        """Replace the producer after a timed-out EndTxn or offsets commit (`commit.must_renew_producer`):
        the new one's init_transactions bumps the transactional.id's epoch, so a delayed request of
        the old one is fenced instead of landing in the next transaction."""
        log.warning("recreating the transactional producer %s: a transaction end timed out and its "
                    "request may still arrive (no KIP-890 in this client)", self._pconf.get("transactional.id"))
        old = self._producer
        old.purge(True, True, False)
        self._producer = self._txn.producer = Producer(self._pconf)
        self._out = ProducerOutput(self._producer)
        for task in self._tasks.values():
            task.rebind(self._out)
        self._txn.init()
        self.stats.producers_renewed += 1
        del old

    def _on_assign(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        try:
            self._open_tasks(sorted({tp.partition for tp in partitions} - set(self._tasks)))
            self._skip_applied(consumer, partitions)
            log.info("assigned partitions %s", sorted({tp.partition for tp in partitions}))
        except Exception as exc:
            log.error("assignment failed: %s", exc)
            self._failure = self._failure or exc
        consumer.assign(partitions)

    def _open_tasks(self, partitions: list[int]) -> None:
        """Open each partition's RocksDB, restore it from the changelogs, then make its Task."""
        root = self.settings.state_dir / self.app.name
        backends: dict[int, RocksBackend] = {}
        try:
            for p in partitions:
                backends[p] = RocksBackend(root / str(p), self.app.all_stores, self._store_memory)
            self.stats.restored += self._restorer.restore(backends)  # type: ignore[arg-type]
        except BaseException:
            for backend in backends.values():
                backend.close()
            raise
        for p, backend in backends.items():
            self._tasks[p] = Task(self.app, p, backend, self._out, self.settings.store_cache_keys,
                                 self.settings.store_cache_kb, self._partition_count)

    def _skip_applied(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        """Start after the store's input offset when the group offset is behind it or missing.

        At-least-once: the store is written before the offset commit, so a crash between them
        leaves the store ahead. Exactly-once: the store is written after the transaction
        commits, so it is never ahead of its group offset, unless that offset was lost (offsets
        retention, a reset, a renamed group): the store's input offset, written with its data
        in one batch, says what it holds, and re-deciding the log from the reset offset would
        apply those records a second time and emit their facts again."""
        held = [tp for tp in partitions
                if tp.topic in self._tasks[tp.partition].state.input_offsets]
        if not held:
            return
        wait = max(30.0, self.settings.transaction_timeout_ms / 1000 + 10)  # a pending txn offset
        try:
            found = consumer.committed(held, wait)
        except KafkaException as exc:  # e.g. still pending in another instance's open transaction
            raise InfrastructureError(f"group offsets of {[f'{t.topic}[{t.partition}]' for t in held]} "
                                      f"not readable in {wait:.0f}s: {exc}", retryable=True) from exc
        committed = {(c.topic, c.partition): c.offset for c in found}
        for tp in held:
            applied = self._tasks[tp.partition].state.input_offsets[tp.topic]
            group = committed[(tp.topic, tp.partition)]
            if group <= applied:
                log.warning("store of %s[%d] holds input offset %d beyond the group offset %s "
                            "(%s): resuming after the store's offset", tp.topic, tp.partition,
                            applied, group if group >= 0 else "missing",
                            "crash before the offset commit" if not self.settings.exactly_once
                            else "offsets lost or reset")
                tp.offset = applied + 1

    def _on_revoke(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        crash_point("engine.during_rebalance")
        revoked = frozenset(tp.partition for tp in partitions)
        try:
            if self._failure is None:
                self._commit(revoked)
        except Exception as exc:
            log.error("commit on revoke failed: %s", exc)
            self._failure = self._failure or exc
        finally:
            self._close_tasks(revoked)

    def _on_lost(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        lost = frozenset(tp.partition for tp in partitions)
        try:
            if self._txn.open:
                self._rollback(InfrastructureError("partitions lost", retryable=True), lost)
        except Exception as exc:
            self._failure = self._failure or exc
        finally:
            self._close_tasks(lost)

    def _close_tasks(self, partitions: frozenset[int]) -> None:
        for p in partitions:
            if self.halted.pop(p, None) is not None:  # handed over: its next owner resumes it
                self._tel.gauge(HALTED_METRIC, len(self.halted), self._labels)
            task = self._tasks.pop(p, None)
            if task is not None:
                task.rollback()
                task.close()

    def _fail(self, exc: BaseException) -> None:
        """Abort the open transaction and drop every write buffer (nothing half-applied)."""
        log.error("engine stopping on error: %s", exc)
        self._failure = self._failure or exc
        try:
            if hasattr(self, "_txn"):
                self._txn.abort()
        except Exception as abort_exc:
            log.error("abort failed (the broker aborts at transaction timeout): %s", abort_exc)
        for task in self._tasks.values():
            task.rollback()

    def _close(self) -> None:
        """Leave the group (revoke closes the stores), then release whatever was opened."""
        try:
            if hasattr(self, "_consumer"):
                self._consumer.close()
        finally:
            self._close_tasks(frozenset(self._tasks))
            if hasattr(self, "_restorer"):
                self._restorer.close()
            if hasattr(self, "_producer") and not self.settings.exactly_once:
                self._producer.flush(10)
            if self._metrics is not None:
                self._metrics.close()


class MetricsReporter:
    """Publishes one metrics record (`runfacts.metrics`) per interval for (app, instance) to `topic`.

    Best effort and off the transaction: a plain producer of its own (acks=1, no idempotence), so
    a metrics record is never part of, nor can abort, a batch; a failed delivery or a full queue is
    logged (once a minute at most) and the record dropped. The lag is what the consumer knows: the
    high watermark it last fetched (cached, no request) minus its position, per owned partition."""

    def __init__(self, app: str, instance: str, topic: str, interval_ms: int, config: dict[str, Any]) -> None:
        self.app, self.instance, self.topic, self.interval_ms = app, instance, topic, interval_ms
        self.window = MetricsWindow()
        self.next_at = time.monotonic() + interval_ms / 1000
        self._warned_at = -_WARN_EVERY_S
        self._producer = Producer(pin_partitioner({**config, "acks": 1, "enable.idempotence": False, "linger.ms": 50,
                                                   "message.timeout.ms": 30_000, "on_delivery": self._delivered},
                                                  "metrics producer"))

    def publish(self, consumer: Consumer, partitions: Iterable[int], sources: Iterable[str],
                halted: Mapping[int, str] | None = None) -> None:
        """The window as one record, with the partitions halted and why (and the next interval's deadline)."""
        now = time.monotonic()
        self.next_at = now + self.interval_ms / 1000
        record = self.window.record(self.app, self.instance, int(time.time() * 1000), self.interval_ms,
                                    _lag(consumer, [TopicPartition(t, p) for t in sources for p in partitions]),
                                    halted)
        try:
            self._producer.produce(self.topic, encode(record), f"{self.app}/{self.instance}".encode())
        except (BufferError, KafkaException) as exc:
            self._warn(f"metrics record to {self.topic} dropped: {exc}")
        self._producer.poll(0)

    def close(self) -> None:
        self._producer.flush(2)

    def _delivered(self, err: Any, msg: Any) -> None:
        if err is not None:
            self._warn(f"metrics record to {self.topic} not delivered: {err}")

    def _warn(self, message: str) -> None:
        if time.monotonic() - self._warned_at >= _WARN_EVERY_S:
            self._warned_at = time.monotonic()
            log.warning("%s (the engine goes on; metrics are best effort)", message)


def _lag(consumer: Consumer, parts: list[TopicPartition]) -> list[tuple[str, int, int]]:
    """(topic, partition, high watermark - position) where the consumer knows both."""
    if not parts:
        return []
    try:
        positions = consumer.position(parts)
    except KafkaException:
        return []
    found = []
    for tp in positions:
        try:
            _low, high = consumer.get_watermark_offsets(tp, cached=True)
        except KafkaException:
            continue
        if tp.offset >= 0 and high is not None and high >= 0:
            found.append((tp.topic, tp.partition, max(0, high - tp.offset)))
    return found


FENCINGS_FILE = "fencings"
FENCING_WINDOW_S = 600
FENCING_LOOP = 3
"""Fenced this many times within the window (this one included): two live instances share an id."""
FENCED_METRIC = "runfacts.engine.fenced"


def note_fencing(path: Path, now_s: float, window_s: float) -> int:
    """Record a fencing at `now_s` in `path` (one time a line, older than the window dropped);
    returns how many the window holds."""
    try:
        times = [float(t) for t in path.read_text().split()]
    except (FileNotFoundError, ValueError):
        times = []
    recent = [t for t in times if now_s - t < window_s] + [now_s]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(f"{t:.3f}\n" for t in recent))
    return len(recent)


_partition = Message.partition
_error = Message.error  # None, or a KafkaError (always truthy)


def consume_error(err: KafkaError) -> None:
    """What a consumer error does to the engine. A missing or forbidden topic stops it (not
    retryable: the configuration is wrong). A fatal consumer (librdkafka hands it on as a
    message error whose code is _FATAL while its fatal flag is not set, e.g. a static member
    fenced by a rejoin after its session timed out in a broker outage) stops it too, retryable:
    that consumer never consumes again, and only a new process (a new consumer) rejoins the
    group. Before, the engine logged it and lived on consuming nothing, so no supervisor
    restarted it (cluster row cluster-two-down). Anything else is logged; librdkafka recovers."""
    if err.code() in (KafkaError.UNKNOWN_TOPIC_OR_PART, KafkaError.TOPIC_AUTHORIZATION_FAILED):
        raise InfrastructureError(f"consumer error: {err}", retryable=False)
    if err.fatal() or err.code() == KafkaError._FATAL:
        raise InfrastructureError(f"the consumer failed for good ({err}); restart the process so a new consumer "
                                  "rejoins the group", retryable=True)
    log.warning("consumer error: %s", err)


@contextmanager
def _signals(stop: Callable[[], None]) -> Iterator[None]:
    """SIGTERM/SIGINT ask for a graceful stop (only in the main thread)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    handler = lambda signum, frame: stop()  # noqa: E731
    previous = {s: signal.signal(s, handler) for s in (signal.SIGTERM, signal.SIGINT)}
    try:
        yield
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)
