"""The commit of a batch: exactly-once (Kafka transactions, KIP-447) or at-least-once.

Exactly-once commit steps, and what a crash or abort between two steps leaves behind:

  0. (loop) the transaction was begun before the batch's first output; outputs are in it.
  1. send_offsets_to_transaction(next input offsets, consumer_group_metadata()) begins on a
     thread of its own; a newer group generation (another instance owns the partitions) fences it.
  2. meanwhile: the application's flush and one changelog record per buffered key of every
     touched partition (the last record per store asks for a delivery report: it carries the
     store's changelog offset).
       -- crash point engine.after_produce_before_commit
     then wait for step 1's answer.
       -- crash point engine.during_commit
  3. commit_transaction(): flushes every output and changelog record (a failed delivery
     makes it fail -> abort), then commits them with the input offsets: the atomic point.
  4. flush(): serves the delivery reports, so each store's changelog offset is known.
       -- crash point engine.after_commit_before_store_write
  5. store write: per partition ONE WriteBatch = buffered data + input offsets + changelog
     offsets; then the buffers are cleared.

  Crash before 3 commits (at any point 0-3): the broker aborts the transaction (on the next
  init_transactions with the same transactional.id, or at transaction.timeout.ms); no
  read_committed reader ever sees its outputs or changelog records, the group offsets stay
  at the previous commit and the store never saw the buffer -> the records are processed
  again from the committed offsets into the same state, producing the same outputs with
  the same derived ids. An in-process failure before 3 completes aborts: abort_transaction,
  discard the write buffers, seek the partitions back to the transaction's first offsets.
  Crash between 3 and 5: Kafka holds the batch, the store does not; on assignment restore
  replays the changelog from the store's changelog offset, so the store catches up to the
  committed state (and the committed group offsets skip the inputs). Crash after 5: nothing
  to repair. (A delivery report missing after a successful commit would leave the store's
  changelog offset older: restore then replays records the store already holds, which is
  harmless since every changelog record is a full value.) A fenced producer (fatal)
  cannot abort: the buffers are discarded, the engine stops, and the partitions' new
  owner restores from the changelog.

At-least-once commit steps:
  1. produce changelog records; 2. flush and check every delivery report;
       -- crash point engine.after_produce_before_commit
  3. store write (data + input offsets + changelog offsets);
       -- crash point engine.after_store_write_before_commit
  4. consumer.commit(offsets) synchronously.
  Crash before 3: records are reprocessed (duplicate outputs, state applied once).
  Crash between 3 and 4: the store is ahead of the group offsets; on assignment the engine
  seeks past the store's input offsets, so the state is not applied twice.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition

from runfacts.crashpoints import crash_point
from runfacts.processors.engine.task import Task
from runfacts.schemas.errors import InfrastructureError

log = logging.getLogger("runfacts.engine")
T = TypeVar("T")
_TIMEOUT_S = 30.0
_RETRIES = 5


class TransactionAborted(InfrastructureError):
    """The batch did not commit and was rolled back; processing resumes from its first offsets."""

    def __init__(self, message: str) -> None:
        super().__init__(message, retryable=True)


class ProducerFenced(InfrastructureError):
    """Another producer with this transactional.id started: this instance must stop."""

    def __init__(self, message: str) -> None:
        super().__init__(message, retryable=False)


TIMEOUTS = frozenset({KafkaError._TIMED_OUT, KafkaError.REQUEST_TIMED_OUT, KafkaError._TIMED_OUT_QUEUE})
FENCED = frozenset({KafkaError._FENCED, KafkaError.PRODUCER_FENCED, KafkaError.INVALID_PRODUCER_EPOCH})
ENDS = frozenset({"commit_transaction", "abort_transaction", "send_offsets_to_transaction"})
"""The transactional calls whose request may still land after the client gave up on it: EndTxn
(commit / abort) and TxnOffsetCommit."""


def must_renew_producer(step: str, code: int | None, wedged: bool = False) -> bool:
    """After this failed step (its KafkaError code; None: not a Kafka error), must the producer be
    replaced before the next transaction? Yes after a timed-out EndTxn or offsets commit, and
    after a wedged producer: the request the client gave up on may still reach the broker, and a
    client without KIP-890 (transactions server-side defense, part 2: librdkafka does not bump
    the epoch per transaction) can see it land in its NEXT transaction (a late commit of the old
    one, or offsets of the old batch inside the new). A new producer's init_transactions bumps
    the epoch of the transactional.id, so every request of the old producer is fenced. Other
    failures (a rejected record, an abortable error) leave the producer sound."""
    return wedged or (step in ENDS and code in TIMEOUTS)


def call(fn: Callable[..., T], *args: Any) -> T:
    """Run a transactional API call: retry retriable errors, map the rest to runfacts errors
    (each carries `step`, the call's name, and `code`, the KafkaError code)."""
    for attempt in range(_RETRIES):
        try:
            return fn(*args)
        except KafkaException as exc:
            err: KafkaError = exc.args[0]
            if err.retriable() and attempt < _RETRIES - 1:
                continue
            failed: InfrastructureError
            if err.code() in FENCED:
                failed = ProducerFenced(f"{fn.__name__} failed: {err}")
            elif err.fatal() or not err.txn_requires_abort():
                failed = InfrastructureError(f"{fn.__name__} failed: {err}", retryable=False)
            else:
                failed = TransactionAborted(f"{fn.__name__} failed: {err}")
            failed.step, failed.code = fn.__name__, err.code()  # type: ignore[attr-defined]
            raise failed from exc
    raise AssertionError("unreachable")


def renewal_needed(exc: BaseException, wedged: bool = False) -> bool:
    """`must_renew_producer` for an error `call` raised (or any other: only `wedged` counts)."""
    return must_renew_producer(getattr(exc, "step", ""), getattr(exc, "code", None), wedged)


def flush_changelogs(producer: Producer, tasks: Sequence[Task]) -> None:
    """Steps 1-2 of both modes: changelog records out, everything flushed, reports checked."""
    for task in tasks:
        task.produce_changelog()
    remaining = producer.flush(_TIMEOUT_S)
    problems = [p for t in tasks for p in t.missing_deliveries()]
    if remaining:
        problems.append(f"{remaining} messages still queued after {_TIMEOUT_S}s")
    if problems:
        raise TransactionAborted("; ".join(problems))


class _Sender:
    """One daemon thread that runs the offsets sends of an engine, one after another.

    Before, each commit started a thread of its own: `Thread.start` blocks until the new thread
    runs, so on a loaded machine every commit of every processor waited for the scheduler (issue
    34: 5% of the decider's samples, py-spy, in `Thread.start` and its join). The thread stays
    for `IDLE_S` without work, then ends (started again by the next send). It is a daemon: a send
    wedged in librdkafka (#5456) never holds the process at exit."""

    IDLE_S = 30.0

    def __init__(self) -> None:
        self._jobs: queue.SimpleQueue[tuple[Callable[[], None], threading.Event]] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._alive = False

    def submit(self, job: Callable[[], None]) -> threading.Event:
        """Runs `job` on the thread; the event is set once it returned."""
        done = threading.Event()
        with self._lock:
            self._jobs.put((job, done))
            if not self._alive:
                self._alive = True
                threading.Thread(target=self._run, name="send-offsets", daemon=True).start()
        return done

    def _run(self) -> None:
        while True:
            try:
                job, done = self._jobs.get(timeout=self.IDLE_S)
            except queue.Empty:
                with self._lock:
                    if self._jobs.empty():
                        self._alive = False
                        return
                continue
            try:
                job()
            finally:
                done.set()


class ExactlyOnce:
    """Transactions: outputs, changelogs and input offsets commit atomically."""

    def __init__(self, consumer: Consumer, timeout_s: float = _TIMEOUT_S) -> None:
        self.producer: Producer
        self._consumer = consumer
        self.timeout_s = timeout_s
        """How long one transactional call may take before `call` tries it again."""
        self.offsets_deadline_s = timeout_s + 5.0
        """How long send_offsets_to_transaction may block at all (see `_send_offsets`)."""
        self.open = False
        self.opened_at = 0.0
        """time.monotonic() when the open transaction began (a fencing past the timeout names it)."""
        self.abort_failed = False
        """The last abort raised: its transaction was not ended by us (`open_for` still counts it)."""
        self.wedged = False
        self.renew = False
        """A timed-out EndTxn / offsets commit (or a wedge) happened: replace the producer
        (`must_renew_producer`) before the next transaction."""
        self._sender = _Sender()

    def init(self) -> None:
        call(self.producer.init_transactions, self.timeout_s)
        self.wedged = self.renew = False

    def begin(self) -> None:
        if not self.open:
            call(self.producer.begin_transaction)
            self.open = True
            self.opened_at = time.monotonic()
            self.abort_failed = False

    def open_for(self) -> float:
        """Seconds the current transaction has been open (0.0: none); one whose abort failed still
        counts, so a fencing found by that abort is diagnosed against the transaction's age."""
        return time.monotonic() - self.opened_at if self.open or self.abort_failed else 0.0

    def commit(self, tasks: Sequence[Task]) -> None:
        try:
            self._commit(tasks)
        except BaseException as exc:
            self.renew = self.renew or renewal_needed(exc, self.wedged)
            raise

    def _commit(self, tasks: Sequence[Task]) -> None:
        offsets = [TopicPartition(topic, t.partition, offset)
                   for t in tasks for topic, offset in t.offsets_to_commit().items()]
        sending = self._start_sending_offsets(offsets) if offsets else None
        try:
            for task in tasks:  # while the coordinator answers the offsets: the flush is Python work
                task.produce_changelog()
            crash_point("engine.after_produce_before_commit")
        except BaseException:
            if sending is not None:  # no abort while another transactional call is in flight
                self.wedged = self.wedged or not sending[0].wait(self.offsets_deadline_s)
            raise
        if sending is not None:
            self._offsets_sent(*sending)
        crash_point("engine.during_commit")
        call(self.producer.commit_transaction, self.timeout_s)
        self.open = False
        self.producer.flush(self.timeout_s)  # serves the delivery reports: changelog offsets
        for problem in (p for t in tasks for p in t.missing_deliveries()):
            log.warning("committed, but %s (restore will replay from the older offset)", problem)
        crash_point("engine.after_commit_before_store_write")
        for task in tasks:
            task.write()

    def _start_sending_offsets(self, offsets: list[TopicPartition]) -> tuple[threading.Event, dict[str, Any]]:
        """Step 2, begun: send_offsets_to_transaction on the offsets thread (`_Sender`), with a
        deadline of our own (`_offsets_sent`). Its two round trips to the group coordinator
        (AddOffsetsToTxn, TxnOffsetCommit) overlap step 1, the flush's Python work; librdkafka is
        thread-safe and a transaction takes records and offsets in any order before
        commit_transaction."""
        metadata = self._consumer.consumer_group_metadata()
        outcome: dict[str, Any] = {}

        def send() -> None:
            try:
                call(self.producer.send_offsets_to_transaction, offsets, metadata, self.timeout_s)
            except BaseException as exc:  # handed to the engine thread by _offsets_sent
                outcome["error"] = exc
        return self._sender.submit(send), outcome

    def _offsets_sent(self, done: threading.Event, outcome: dict[str, Any]) -> None:
        """Step 2, ended. The deadline is ours because librdkafka (#5456, still in 2.16) ignores
        its timeout when the group coordinator went away during the transaction, and blocked the
        engine forever after a broker restart (crash matrix, broker bounce). Past the deadline
        the producer is wedged: fail (not retryable) so the process restarts."""
        if not done.wait(self.offsets_deadline_s):
            self.wedged = True
            raise InfrastructureError(f"send_offsets_to_transaction did not return in {self.offsets_deadline_s:.0f}s "
                                      "(librdkafka #5456: coordinator lost); restart the process",
                                      retryable=False)
        if "error" in outcome:
            raise outcome["error"]

    def abort(self) -> None:
        """Abort; flushing first lets in-flight partition registrations finish (librdkafka
        #4849: aborting while one is in flight can fail with a fatal INVALID_TXN_STATE).
        A wedged producer is left alone: the broker aborts at transaction.timeout.ms."""
        if self.open and self.wedged:
            self.open = False
        if self.open:
            self.open = False
            self.producer.flush(self.timeout_s)
            try:
                call(self.producer.abort_transaction, self.timeout_s)
            except BaseException as exc:
                self.abort_failed = True
                self.renew = self.renew or renewal_needed(exc)
                raise


class AtLeastOnce:
    """No transactions: flush, write the store, then commit the offsets."""

    def __init__(self, consumer: Consumer) -> None:
        self.producer: Producer
        self._consumer = consumer
        self.open = False
        self._reports: dict[Any, Any] = {}
        self.on_delivery = self._reports.setdefault
        """Producer-wide delivery report (outputs; changelog records have their own): called
        from C with (None, msg) or (KafkaError, msg) it runs no Python code per message; the
        dict keeps one message per distinct outcome, so any key but None is a failure."""

    def init(self) -> None:
        """Nothing to initialise without transactions."""

    def begin(self) -> None:
        self.open = True

    def failures(self) -> list[str]:
        """Outputs reported undelivered since the last commit or abort (and forget them)."""
        lost = [f"{msg.topic()}[{msg.partition()}]: {err}" for err, msg in self._reports.items()
                if err is not None]
        self._reports.clear()
        return lost

    def commit(self, tasks: Sequence[Task]) -> None:
        flush_changelogs(self.producer, tasks)
        if lost := self.failures():
            raise TransactionAborted("outputs not delivered: " + "; ".join(lost[:5]))
        crash_point("engine.after_produce_before_commit")
        offsets = [TopicPartition(topic, t.partition, offset)
                   for t in tasks for topic, offset in t.offsets_to_commit().items()]
        for task in tasks:
            task.write()
        crash_point("engine.after_store_write_before_commit")
        self.open = False
        if offsets:
            try:
                self._consumer.commit(offsets=offsets, asynchronous=False)
            except KafkaException as exc:  # the store holds the offsets; the next commit covers
                log.warning("offset commit failed (state already written): %s", exc)

    def abort(self) -> None:
        self.open = False
        self._reports.clear()
