"""Regression (crash matrix, broker bounce): send_offsets_to_transaction can block forever.

librdkafka #5456 (open, present in 2.16): after the group coordinator went away during a
transaction, `send_offsets_to_transaction` ignores its timeout. The engine hung for good after
a broker restart; now the commit gives up after its own deadline, marks the producer wedged
(no further calls into it) and fails with a non-retryable error so the process restarts.
"""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest

from runfacts.processors.engine.commit import ExactlyOnce
from runfacts.schemas.errors import InfrastructureError


class StuckProducer:
    """A transactional producer whose send_offsets_to_transaction never returns."""

    def __init__(self) -> None:
        self.release = threading.Event()
        self.calls: list[str] = []

    def flush(self, timeout: float = 0) -> int:
        self.calls.append("flush")
        return 0

    def send_offsets_to_transaction(self, *args: Any) -> None:
        self.calls.append("send_offsets")
        self.release.wait()

    def commit_transaction(self, *args: Any) -> None:
        self.calls.append("commit")

    def abort_transaction(self, *args: Any) -> None:
        self.calls.append("abort")


class OneTask:
    partition = 0

    def produce_changelog(self) -> int:
        return 0

    def missing_deliveries(self) -> list[str]:
        return []

    def offsets_to_commit(self) -> dict[str, int]:
        return {"in": 5}

    def write(self) -> None:
        raise AssertionError("the store must not be written when the commit failed")


class Consumer:
    def consumer_group_metadata(self) -> object:
        return object()


def test_commit_fails_instead_of_hanging_when_send_offsets_ignores_its_timeout() -> None:
    txn = ExactlyOnce(Consumer())  # type: ignore[arg-type]
    txn.offsets_deadline_s = 0.2
    producer = StuckProducer()
    txn.producer = producer  # type: ignore[assignment]
    txn.open = True
    try:
        with pytest.raises(InfrastructureError, match="librdkafka #5456") as caught:
            txn.commit([OneTask()])  # type: ignore[list-item]
        assert not caught.value.retryable and txn.wedged
        txn.abort()
        assert producer.calls[-1] == "send_offsets", "a wedged producer is not called again"
        assert "commit" not in producer.calls and "abort" not in producer.calls
        assert not txn.open
    finally:
        producer.release.set()


class SlowOffsetsProducer(StuckProducer):
    """send_offsets_to_transaction answers after `delay` seconds; records when each call ends."""

    def __init__(self, delay: float) -> None:
        super().__init__()
        self.delay = delay

    def send_offsets_to_transaction(self, *args: Any) -> None:
        self.calls.append("send_offsets")
        self.release.wait(self.delay)
        self.calls.append("offsets_sent")


class FailingFlushTask(OneTask):
    def __init__(self, producer: SlowOffsetsProducer) -> None:
        self.producer = producer

    def produce_changelog(self) -> int:
        deadline = time.monotonic() + 2  # the offsets thread takes the send while this flush still runs
        while not self.producer.calls and time.monotonic() < deadline:
            time.sleep(0.001)
        assert self.producer.calls == ["send_offsets"], "the offsets are on their way while the batch flushes"
        raise RuntimeError("the application's flush failed")


def test_offsets_overlap_the_flush_and_a_failed_flush_waits_for_them_before_the_abort() -> None:
    txn = ExactlyOnce(Consumer())  # type: ignore[arg-type]
    producer = SlowOffsetsProducer(delay=0.3)
    txn.producer = producer  # type: ignore[assignment]
    txn.open = True
    with pytest.raises(RuntimeError, match="flush failed"):
        txn.commit([FailingFlushTask(producer)])  # type: ignore[list-item]
    assert producer.calls == ["send_offsets", "offsets_sent"], "no abort while send_offsets is in flight"
    assert not txn.wedged
    txn.abort()
    assert producer.calls[-2:] == ["flush", "abort"]


class WrittenTask(OneTask):
    written = False

    def write(self) -> None:
        self.written = True


def test_commit_sends_offsets_then_commits_after_the_flush() -> None:
    txn = ExactlyOnce(Consumer())  # type: ignore[arg-type]
    producer = SlowOffsetsProducer(delay=0.05)
    txn.producer = producer  # type: ignore[assignment]
    txn.open = True
    task = WrittenTask()
    txn.commit([task])  # type: ignore[list-item]
    assert producer.calls[:3] == ["send_offsets", "offsets_sent", "commit"]
    assert task.written and not txn.open


class ThreadRecordingProducer(StuckProducer):
    def __init__(self) -> None:
        super().__init__()
        self.threads: list[threading.Thread] = []

    def send_offsets_to_transaction(self, *args: Any) -> None:
        self.threads.append(threading.current_thread())


def test_the_offsets_of_successive_commits_go_out_on_one_thread_not_a_new_one_each() -> None:
    """Issue 34: a thread started per commit made every commit wait in `Thread.start` for the
    scheduler; one offsets thread serves them all (and it is not the engine's)."""
    txn = ExactlyOnce(Consumer())  # type: ignore[arg-type]
    producer = ThreadRecordingProducer()
    txn.producer = producer  # type: ignore[assignment]
    for _ in range(3):
        txn.open = True
        txn.commit([WrittenTask()])  # type: ignore[list-item]
    assert len(producer.threads) == 3
    assert len(set(map(id, producer.threads))) == 1 and producer.threads[0] is not threading.current_thread()
    assert producer.threads[0].daemon, "a send wedged in librdkafka must not hold the process at exit"
