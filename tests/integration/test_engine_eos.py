"""Exactly-once on a real broker: no duplicates and no gaps after aborts and handler failures."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from engine_support import (
    EngineThread,
    check_exactly_once,
    counter_on,
    counter_topics,
    expected,
    keyed,
    outputs,
    produce,
    settings,
)

from runfacts.processors.engine import commit
from runfacts.processors.engine.api import ProcessingError
from runfacts.processors.engine.commit import TransactionAborted

pytestmark = pytest.mark.integration


@pytest.fixture
def topics(kafka_bootstrap: str, unique: str) -> tuple[str, str, str]:
    return counter_topics(kafka_bootstrap, "eos", unique)


def app_for(unique: str, topics: tuple[str, str, str], **kw: str):
    return counter_on("eos", unique, topics, **kw)


def test_outputs_have_no_duplicates_or_gaps_when_a_transaction_aborts(
        kafka_bootstrap: str, unique: str, topics, tmp_path: Path, monkeypatch) -> None:
    real = commit.crash_point
    calls = {"n": 0}

    def abort_second_commit(name: str) -> None:
        if name == "engine.during_commit":
            calls["n"] += 1
            if calls["n"] == 2:
                raise TransactionAborted("forced abort between send_offsets and commit")
        real(name)

    monkeypatch.setattr(commit, "crash_point", abort_second_commit)
    total = produce(kafka_bootstrap, topics[0], keyed(1000))
    conf = settings(kafka_bootstrap, tmp_path, "a", commit_every=200, consume_batch=100)
    runner = EngineThread(app_for(unique, topics), conf).start()
    runner.wait_until(lambda: runner.engine.stats.aborts == 1 and runner.engine.stats.commits >= 2)
    total += produce(kafka_bootstrap, topics[0], keyed(1000, start=1000))
    # the aborted transaction held however many records the timing put in it: wait for all
    # inputs to be committed rather than for a fixed count of reprocessed ones
    runner.wait_until(lambda: runner.engine.stats.processed >= total and not runner.engine._txn.open, 90)
    deadline = time.monotonic() + 60
    while len(committed := outputs(kafka_bootstrap, topics[1])) < total and time.monotonic() < deadline:
        time.sleep(0.5)
    runner.stop()
    check_exactly_once(committed, expected(total))
    assert len(outputs(kafka_bootstrap, topics[1], committed=False)) > total, "no abort seen"


def test_restart_continues_exactly_once_when_handler_failure_stopped_the_engine(
        kafka_bootstrap: str, unique: str, topics, tmp_path: Path) -> None:
    records = keyed(500) + [(b"k1", b"boom")] + keyed(500, start=500)
    produce(kafka_bootstrap, topics[0], records)
    conf = settings(kafka_bootstrap, tmp_path, "a", commit_every=100, consume_batch=50)
    failing = EngineThread(app_for(unique, topics, fail_on="boom"), conf).start()
    failing.join()
    assert isinstance(failing.error, ProcessingError)
    assert f"{topics[0]}[" in str(failing.error) and "RuntimeError" in str(failing.error)
    before = outputs(kafka_bootstrap, topics[1])
    assert 0 < len(before) < 1000

    fixed = EngineThread(app_for(unique, topics), conf).start()
    fixed.wait_until(lambda: fixed.engine.stats.processed >= 1001 - len(before)
                     and not fixed.engine._txn.open)
    fixed.stop()
    final = outputs(kafka_bootstrap, topics[1])
    exp = expected(1000)
    exp["k1"] += 1
    check_exactly_once(final, exp)
