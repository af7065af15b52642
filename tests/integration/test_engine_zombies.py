"""Issue 18.2 / 18.4 on the real broker: a restart fences its predecessor through the persisted
instance id, two live instances sharing an id are named as such, and a timed-out commit replaces
the producer and keeps exactly-once."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from confluent_kafka import KafkaError, KafkaException, Producer
from engine_support import (
    EngineThread,
    check_exactly_once,
    counter_on,
    counter_topics,
    expected,
    keyed,
    outputs,
    produce,
    read_all,
    settings,
)

from runfacts.processors.engine import commit
from runfacts.processors.engine.commit import ProducerFenced
from runfacts.processors.engine.settings import EngineSettings, producer_config

pytestmark = pytest.mark.integration


@pytest.fixture
def topics(kafka_bootstrap: str, unique: str) -> tuple[str, str, str]:
    return counter_topics(kafka_bootstrap, "zmb", unique)


def app_for(unique: str, topics: tuple[str, str, str], **kw: str):
    return counter_on("zmb", unique, topics, **kw)


def test_restart_fences_the_predecessors_open_transaction_when_the_id_comes_from_the_state_dir(
        kafka_bootstrap: str, unique: str, topics, tmp_path: Path) -> None:
    app = app_for(unique, topics)
    before = Producer(producer_config(app, EngineSettings(bootstrap_servers=kafka_bootstrap, state_dir=tmp_path)))
    before.init_transactions(30)
    before.begin_transaction()
    before.produce(topics[1], b"zombie", b"k")
    before.flush(30)
    # the restarted process: new settings, no RUNFACTS_INSTANCE_ID, the same state dir
    after = Producer(producer_config(app, EngineSettings(bootstrap_servers=kafka_bootstrap, state_dir=tmp_path)))
    after.init_transactions(30)  # fences `before` and aborts its transaction at once

    with pytest.raises(KafkaException) as raised:
        before.commit_transaction(30)
    assert raised.value.args[0].code() in commit.FENCED
    assert read_all(kafka_bootstrap, topics[1]) == []


def test_a_second_live_instance_with_the_same_id_is_named_when_it_fences_the_first(
        kafka_bootstrap: str, unique: str, topics, tmp_path: Path) -> None:
    app = app_for(unique, topics)
    first = EngineThread(app, settings(kafka_bootstrap, tmp_path / "a", "twin", commit_every=50)).start()
    produce(kafka_bootstrap, topics[0], keyed(200))
    first.wait_until(lambda: first.engine.stats.commits >= 1, 60)
    second = EngineThread(app, settings(kafka_bootstrap, tmp_path / "b", "twin", commit_every=50)).start()
    deadline = time.monotonic() + 60
    while first.error is None and time.monotonic() < deadline:
        produce(kafka_bootstrap, topics[0], keyed(40))
        time.sleep(0.5)
    second.stop()

    assert isinstance(first.error, ProducerFenced), first.error
    assert "another process started with this instance id 'twin'" in str(first.error)
    assert (tmp_path / "a" / "fencings").read_text().count("\n") == 1


def test_producer_is_replaced_and_exactly_once_holds_when_a_commit_times_out(
        kafka_bootstrap: str, unique: str, topics, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    real = commit.crash_point
    calls = {"n": 0}

    def commit_transaction(*_: object) -> None:  # as librdkafka answers an EndTxn that timed out
        raise KafkaException(KafkaError(KafkaError._TIMED_OUT, "EndTxn timed out", retriable=True))

    def time_out_second_commit(name: str) -> None:
        if name == "engine.during_commit":
            calls["n"] += 1
            if calls["n"] == 2:
                commit.call(commit_transaction)
        real(name)

    monkeypatch.setattr(commit, "crash_point", time_out_second_commit)
    runner = _two_thousand_through_a_renewal(kafka_bootstrap, unique, topics, tmp_path, commits=2)

    assert runner.engine.stats.aborts == 1


def test_a_commit_that_landed_although_the_client_timed_out_is_finished_not_processed_again(
        kafka_bootstrap: str, unique: str, topics, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The EndTxn reaches the coordinator and commits, but every answer is lost (a one-way network
    fault longer than the call's retries): the client sees commit_transaction time out. After
    replacing the producer the engine must learn that the batch committed (the group's offsets
    are its end) and finish it, not seek back and produce it a second time."""
    real_call = commit.call
    commits = {"n": 0}

    def landed_but_timed_out(fn, *args):  # type: ignore[no-untyped-def]
        if getattr(fn, "__name__", "") == "commit_transaction":
            commits["n"] += 1
            if commits["n"] == 2:
                real_call(fn, *args)  # the commit lands at the broker ...
                failed = commit.InfrastructureError("commit_transaction failed: EndTxn timed out", retryable=False)
                failed.step, failed.code = "commit_transaction", KafkaError._TIMED_OUT  # type: ignore[attr-defined]
                raise failed  # ... and the client never hears of it
        return real_call(fn, *args)

    monkeypatch.setattr(commit, "call", landed_but_timed_out)
    runner = _two_thousand_through_a_renewal(kafka_bootstrap, unique, topics, tmp_path, commits=3)

    assert runner.engine.stats.aborts == 0  # nothing was rolled back: the batch had committed


def _two_thousand_through_a_renewal(kafka_bootstrap: str, unique: str, topics: tuple[str, str, str],
                                    tmp_path: Path, commits: int) -> EngineThread:
    """1000 inputs, until the producer was renewed once after `commits` commits, 1000 more;
    then exactly-once over all 2000 outputs. Returns the stopped runner."""
    total = produce(kafka_bootstrap, topics[0], keyed(1000))
    runner = EngineThread(app_for(unique, topics), settings(kafka_bootstrap, tmp_path, "r", commit_every=200,
                                                            consume_batch=100)).start()
    runner.wait_until(lambda: runner.engine.stats.producers_renewed == 1
                      and runner.engine.stats.commits >= commits, 60)
    total += produce(kafka_bootstrap, topics[0], keyed(1000, start=1000))
    runner.wait_until(lambda: runner.engine.stats.processed >= total and not runner.engine._txn.open, 90)
    deadline = time.monotonic() + 60
    while len(committed := outputs(kafka_bootstrap, topics[1])) < total and time.monotonic() < deadline:
        time.sleep(0.5)
    runner.stop()
    check_exactly_once(committed, expected(total))
    return runner
