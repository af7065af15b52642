"""When the engine commits: at once when its input is drained, once per caught-up interval while it
flows and the engine keeps up, once per (longer) interval while it works through a backlog."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer
from engine_support import EngineThread, create_topics, outputs, produce, settings

from runfacts.dev.apps import counter_app

pytestmark = pytest.mark.integration


def _app(unique: str):
    return counter_app(name=f"lat-{unique}", source=f"lat-in-{unique}", output=f"lat-out-{unique}",
                       dead_letter_topic=f"lat-dlq-{unique}")


def test_output_commits_within_a_poll_when_the_input_is_drained(
        kafka_bootstrap: str, unique: str, tmp_path: Path) -> None:
    create_topics(kafka_bootstrap, [f"lat-in-{unique}", f"lat-out-{unique}", f"lat-dlq-{unique}"])
    conf = settings(kafka_bootstrap, tmp_path, "a", commit_interval_ms=600_000)
    runner = EngineThread(_app(unique), conf).start()
    runner.wait_until(lambda: runner.engine.partitions == list(range(6)))
    produce(kafka_bootstrap, f"lat-in-{unique}", [(b"k", b"x")])
    start = time.monotonic()
    runner.wait_until(lambda: runner.engine.stats.commits >= 1, 30)
    waited = time.monotonic() - start
    runner.stop()
    assert waited < 30, "committed long before the 10-minute interval"
    assert [o["n"] for o in outputs(kafka_bootstrap, f"lat-out-{unique}")] == [1]


def test_transactions_commit_about_once_per_interval_when_input_keeps_flowing(
        kafka_bootstrap: str, unique: str, tmp_path: Path) -> None:
    runner, sent = _trickled(kafka_bootstrap, unique, tmp_path, "b", commit_interval_ms=500, poll_timeout_ms=200,
                             commit_interval_caught_up_ms=0)
    assert 3 <= runner.engine.stats.commits <= sent // 20, "batched per interval, not per record"


def test_a_flowing_input_the_engine_keeps_up_with_commits_at_the_caught_up_interval(
        kafka_bootstrap: str, unique: str, tmp_path: Path) -> None:
    runner, _sent = _trickled(kafka_bootstrap, unique, tmp_path, "d", commit_interval_ms=60_000,
                              poll_timeout_ms=100, commit_interval_caught_up_ms=50)
    # every consume is partial (a few dozen records in 100 ms, batch 250), so each commits: not once a minute
    assert runner.engine.stats.commits >= 10, runner.engine.stats


def _trickled(bootstrap: str, unique: str, tmp_path: Path, instance: str, **conf: Any) -> tuple[EngineThread, int]:
    """An engine with `conf` fed ~250 records a second for 3 s (never drained for a whole poll),
    all processed, committed and output, then stopped; returns it and how many were sent."""
    create_topics(bootstrap, [f"lat-in-{unique}", f"lat-out-{unique}", f"lat-dlq-{unique}"])
    runner = EngineThread(_app(unique), settings(bootstrap, tmp_path, instance, **conf)).start()
    runner.wait_until(lambda: runner.engine.partitions == list(range(6)))
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0})
    sent, start = 0, time.monotonic()
    while time.monotonic() - start < 3:
        producer.produce(f"lat-in-{unique}", b"x", f"k{sent % 7}".encode())
        producer.poll(0)
        sent += 1
        time.sleep(0.004)
    producer.flush(10)
    runner.wait_until(lambda: runner.engine.stats.processed >= sent and not runner.engine._txn.open, 30)
    runner.stop()
    assert len(outputs(bootstrap, f"lat-out-{unique}")) == sent
    return runner, sent


def test_a_backlog_commits_at_the_long_interval_not_the_caught_up_one(
        kafka_bootstrap: str, unique: str, tmp_path: Path) -> None:
    create_topics(kafka_bootstrap, [f"lat-in-{unique}", f"lat-out-{unique}", f"lat-dlq-{unique}"])
    backlog = produce(kafka_bootstrap, f"lat-in-{unique}", ((f"k{i % 50}".encode(), b"x") for i in range(20_000)))
    conf = settings(kafka_bootstrap, tmp_path, "e", commit_interval_ms=60_000, commit_interval_caught_up_ms=1,
                    consume_batch=20, commit_every=1_000_000)
    runner = EngineThread(_app(unique), conf).start()
    runner.wait_until(lambda: runner.engine.stats.processed >= backlog and not runner.engine._txn.open, 120)
    runner.stop()
    assert len(outputs(kafka_bootstrap, f"lat-out-{unique}")) == backlog
    # full consumes (20 of 20) keep the transaction open: the backlog commits when drained, not every 1 ms;
    # a partial consume now and then (a partition's fetch arriving late) may commit early, not hundreds of times
    assert runner.engine.stats.commits <= 50, runner.engine.stats


def test_first_transaction_stays_open_for_the_interval_when_idle_commits_are_off(
        kafka_bootstrap: str, unique: str, tmp_path: Path) -> None:
    create_topics(kafka_bootstrap, [f"lat-in-{unique}", f"lat-out-{unique}", f"lat-dlq-{unique}"])
    conf = settings(kafka_bootstrap, tmp_path, "c", commit_interval_ms=60_000, commit_on_idle=False)
    runner = EngineThread(_app(unique), conf).start()
    runner.wait_until(lambda: runner.engine.partitions == list(range(6)))
    produce(kafka_bootstrap, f"lat-in-{unique}", [(b"k", b"x")])
    runner.wait_until(lambda: runner.engine.stats.processed >= 1, 30)
    time.sleep(0.5)
    commits_before_stop = runner.engine.stats.commits
    runner.stop()  # drains: commits the open transaction
    assert commits_before_stop == 0, "the first batch committed at once, not one interval after start"
    assert runner.engine.stats.commits == 1
    assert [o["n"] for o in outputs(kafka_bootstrap, f"lat-out-{unique}")] == [1]


def test_a_lone_record_is_processed_at_once_not_when_the_poll_timeout_is_up(
        kafka_bootstrap: str, unique: str, tmp_path: Path) -> None:
    # librdkafka's consume(250, t) returns early only with 250 records: a lone record waited out the
    # whole poll timeout before it was processed (issue 34); the engine now takes what has arrived
    create_topics(kafka_bootstrap, [f"lat-in-{unique}", f"lat-out-{unique}", f"lat-dlq-{unique}"])
    conf = settings(kafka_bootstrap, tmp_path, "f", poll_timeout_ms=60_000, commit_interval_ms=600_000)
    runner = EngineThread(_app(unique), conf).start()
    runner.wait_until(lambda: runner.engine.partitions == list(range(6)))
    produce(kafka_bootstrap, f"lat-in-{unique}", [(b"k", b"x")])
    runner.wait_until(lambda: runner.engine.stats.commits >= 1, 30)  # not after the 60-s poll timeout
    runner.stop()
    assert [o["n"] for o in outputs(kafka_bootstrap, f"lat-out-{unique}")] == [1]


def test_a_timer_due_before_the_next_timer_check_fires_at_its_time(
        kafka_bootstrap: str, unique: str, tmp_path: Path) -> None:
    # timers were looked at every timer_interval_ms only: the dispatcher's look at a call it started
    # (10 ms on) waited for the next 100-ms check; a timer due sooner now fires when it is due
    create_topics(kafka_bootstrap, [f"lat-in-{unique}", f"lat-out-{unique}", f"lat-dlq-{unique}"])
    app = counter_app(name=f"lat-{unique}", source=f"lat-in-{unique}", output=f"lat-out-{unique}",
                      dead_letter_topic=f"lat-dlq-{unique}", idle_ms=200)
    conf = settings(kafka_bootstrap, tmp_path, "g", timer_interval_ms=600_000)
    runner = EngineThread(app, conf).start()
    runner.wait_until(lambda: runner.engine.partitions == list(range(6)))
    produce(kafka_bootstrap, f"lat-in-{unique}", [(b"k", b"x")])
    runner.wait_until(lambda: runner.engine.stats.timers_fired >= 1, 30)  # not at the 10-minute check
    runner.wait_until(lambda: not runner.engine._txn.open, 30)
    runner.stop()
    assert [o.get("idle", False) for o in outputs(kafka_bootstrap, f"lat-out-{unique}")] == [False, True]


def test_a_quiet_transaction_waits_for_the_interval_and_commits_with_the_next_output(
        kafka_bootstrap: str, unique: str, tmp_path: Path) -> None:
    # a record with no output (the dispatcher folding an event that asks nothing of it) committed at
    # once, in a transaction of its own; nobody reads anything of it, so it now waits for the interval
    create_topics(kafka_bootstrap, [f"lat-in-{unique}", f"lat-out-{unique}", f"lat-dlq-{unique}"])
    app = counter_app(name=f"lat-{unique}", source=f"lat-in-{unique}", output=f"lat-out-{unique}",
                      dead_letter_topic=f"lat-dlq-{unique}", quiet_on="q")
    runner = EngineThread(app, settings(kafka_bootstrap, tmp_path, "h", commit_interval_ms=60_000)).start()
    runner.wait_until(lambda: runner.engine.partitions == list(range(6)))
    produce(kafka_bootstrap, f"lat-in-{unique}", [(b"k", b"q")])
    runner.wait_until(lambda: runner.engine.stats.processed >= 1, 30)
    time.sleep(0.5)  # 100 caught-up intervals: a loud transaction would have committed long ago
    assert runner.engine.stats.commits == 0, "the quiet transaction waits for the 60-s interval"
    produce(kafka_bootstrap, f"lat-in-{unique}", [(b"k", b"x")])
    runner.wait_until(lambda: runner.engine.stats.commits >= 1, 30)  # the output commits at once, with it
    runner.stop()
    assert runner.engine.stats.commits == 1, runner.engine.stats
    assert [o["n"] for o in outputs(kafka_bootstrap, f"lat-out-{unique}")] == [2]


def test_a_quiet_transaction_commits_at_once_when_deferring_is_off(
        kafka_bootstrap: str, unique: str, tmp_path: Path) -> None:
    create_topics(kafka_bootstrap, [f"lat-in-{unique}", f"lat-out-{unique}", f"lat-dlq-{unique}"])
    app = counter_app(name=f"lat-{unique}", source=f"lat-in-{unique}", output=f"lat-out-{unique}",
                      dead_letter_topic=f"lat-dlq-{unique}", quiet_on="q")
    conf = settings(kafka_bootstrap, tmp_path, "i", commit_interval_ms=60_000, defer_quiet_commits=False)
    runner = EngineThread(app, conf).start()
    runner.wait_until(lambda: runner.engine.partitions == list(range(6)))
    produce(kafka_bootstrap, f"lat-in-{unique}", [(b"k", b"q")])
    runner.wait_until(lambda: runner.engine.stats.commits >= 1, 30)  # drained: at once, not after 60 s
    runner.stop()
    assert outputs(kafka_bootstrap, f"lat-out-{unique}") == []
