"""State on a real broker: takeover by a second instance, restore, timers across restarts."""

from __future__ import annotations

import shutil
import time
from pathlib import Path

import pytest
from engine_support import (
    EngineThread,
    check_exactly_once,
    create_topics,
    expected,
    keyed,
    outputs,
    produce,
    read_all,
    settings,
    wait_for,
)

from runfacts.dev.apps import counter_app
from runfacts.processors.engine.runner import Engine
from runfacts.processors.engine.store import RocksBackend

pytestmark = pytest.mark.integration


@pytest.fixture
def topics(kafka_bootstrap: str, unique: str) -> tuple[str, str, str]:
    names = (f"st-in-{unique}", f"st-out-{unique}", f"st-dlq-{unique}")
    create_topics(kafka_bootstrap, names)
    return names


def app_for(unique: str, topics: tuple[str, str, str], **kw):
    return counter_app(name=f"st-{unique}", source=topics[0], output=topics[1],
                       dead_letter_topic=topics[2], **kw)


def idle(runner: EngineThread, processed: int) -> bool:
    engine = runner.engine
    return engine.stats.processed >= processed and not engine._txn.open


def snapshot(state_dir: Path, app_name: str) -> dict:
    """Every store's contents and changelog offsets, per partition, read from disk."""
    found = {}
    for part_dir in sorted((state_dir / app_name).iterdir()):
        backend = RocksBackend(part_dir, ("counts", "__timers"))
        meta = {k: v for k, v in backend.meta().items() if k.startswith(b"cl")}
        found[part_dir.name] = {s: dict(backend.scan(s, b"", b"\xff" * 8))
                                for s in ("counts", "__timers")} | {"meta": meta}
        backend.close()
    return found


def test_second_instance_takes_over_partitions_with_state_restored_when_it_joins(
        kafka_bootstrap: str, unique: str, topics, tmp_path: Path) -> None:
    app = app_for(unique, topics)
    produce(kafka_bootstrap, topics[0], keyed(600))
    first = EngineThread(app, settings(kafka_bootstrap, tmp_path / "a", "a")).start()
    first.wait_until(lambda: idle(first, 600))
    second = EngineThread(app, settings(kafka_bootstrap, tmp_path / "b", "b")).start()
    second.wait_until(lambda: first.engine.partitions and second.engine.partitions
                      and len(first.engine.partitions + second.engine.partitions) == 6)
    assert not set(first.engine.partitions) & set(second.engine.partitions)
    assert second.engine.stats.restored > 0
    produce(kafka_bootstrap, topics[0], keyed(600, start=600))
    wait_for(lambda: len(outputs(kafka_bootstrap, topics[1])) >= 1200, what="1200 outputs")
    first.stop()
    second.stop()
    check_exactly_once(outputs(kafka_bootstrap, topics[1]), expected(1200))


def test_restore_rebuilds_identical_state_when_local_store_deleted(
        kafka_bootstrap: str, unique: str, topics, tmp_path: Path) -> None:
    app = app_for(unique, topics, idle_ms=3_600_000)
    conf = settings(kafka_bootstrap, tmp_path, "a", commit_every=100, consume_batch=100)
    produce(kafka_bootstrap, topics[0], keyed(1500))
    runner = EngineThread(app, conf).start()
    runner.wait_until(lambda: idle(runner, 1500))
    runner.stop()
    before = snapshot(tmp_path, app.name)
    shutil.rmtree(tmp_path / app.name)

    again = EngineThread(app, conf).start()
    again.wait_until(lambda: len(again.engine.partitions) == 6)
    again.stop()
    assert again.engine.stats.restored >= 40 + 40
    assert snapshot(tmp_path, app.name) == before
    assert sum(len(p["counts"]) for p in before.values()) == 40


def test_timers_fire_once_after_restart_when_due_while_stopped(
        kafka_bootstrap: str, unique: str, topics, tmp_path: Path) -> None:
    app = app_for(unique, topics, idle_ms=60_000)
    conf = settings(kafka_bootstrap, tmp_path, "a")
    produce(kafka_bootstrap, topics[0], keyed(20, keys=5))
    runner = EngineThread(app, conf).start()
    runner.wait_until(lambda: idle(runner, 20))
    runner.stop()
    assert runner.engine.stats.timers_fired == 0
    shutil.rmtree(tmp_path / app.name)  # the timers must come back from their changelog

    later = Engine(app, conf, clock=lambda: time.time() + 61)  # a minute has passed
    again = EngineThread.around(later).start()
    again.wait_until(lambda: again.engine.stats.timers_fired >= 5 and not again.engine._txn.open)
    time.sleep(0.3)
    again.stop()
    fired = [r for r in outputs(kafka_bootstrap, topics[1]) if r.get("idle")]
    assert sorted((r["key"], r["n"]) for r in fired) == [(f"k{i}", 4) for i in range(5)]
    assert again.engine.stats.timers_fired == 5


def test_undecodable_record_goes_to_dead_letter_topic_when_policy_is_dead_letter(
        kafka_bootstrap: str, unique: str, topics, tmp_path: Path) -> None:
    app = app_for(unique, topics)
    produce(kafka_bootstrap, topics[0], [(b"k0", b"ok"), (b"k0", b"\xff\xfe"), (b"k0", b"ok")])
    runner = EngineThread(app, settings(kafka_bootstrap, tmp_path, "a")).start()
    runner.wait_until(lambda: idle(runner, 3))
    runner.stop()
    (dead,) = read_all(kafka_bootstrap, topics[2])
    headers = dict(dead.headers())
    assert dead.value() == b"\xff\xfe"
    assert headers["dlq.topic"] == topics[0].encode()
    assert headers["dlq.offset"] == b"1"
    assert headers["dlq.schema"] == b"demo.Utf8"
    assert [r["n"] for r in outputs(kafka_bootstrap, topics[1])] == [1, 2]


def test_at_least_once_processes_every_record_when_run_without_transactions(
        kafka_bootstrap: str, unique: str, topics, tmp_path: Path) -> None:
    app = app_for(unique, topics)
    produce(kafka_bootstrap, topics[0], keyed(800))
    conf = settings(kafka_bootstrap, tmp_path, "a", guarantee="at_least_once")
    runner = EngineThread(app, conf).start()
    runner.wait_until(lambda: idle(runner, 800))
    runner.stop()
    check_exactly_once(outputs(kafka_bootstrap, topics[1], committed=False), expected(800))
