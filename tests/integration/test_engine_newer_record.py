"""On the real broker: a stored record written by a newer runfacts halts only its partition
(issue 35). Before, the handler's `NewerStoredVersion` stopped the engine, and every restart met
the same record: every partition of the instance crash-looped for one record."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from confluent_kafka import Producer
from engine_support import EngineThread, create_topics, outputs, read_all, settings

from runfacts.processors.engine.api import Application, Context, Record, Source
from runfacts.processors.engine.versions import NewerStoredVersion

pytestmark = pytest.mark.integration


def _app(name: str, source: str, output: str, upgraded: bool = False, metrics: str = "") -> Application:
    def process(record: Record, ctx: Context) -> None:
        if record.value == b"newer" and not upgraded:  # as `load_state` meets a run state a newer runfacts stored
            raise NewerStoredVersion("run state", 99, "written by a newer runfacts; upgrade this process")
        ctx.emit(output, record.key, json.dumps({"p": record.partition, "v": record.value.decode()}).encode())

    return Application(name=name, sources=(Source(source),), process=process, stores=("s",), metrics_topic=metrics)


def _send(bootstrap: str, topic: str, records: list[tuple[int, bytes]]) -> None:
    producer = Producer({"bootstrap.servers": bootstrap})
    for partition, value in records:
        producer.produce(topic, value, b"k", partition=partition)
    assert producer.flush(30) == 0


def test_only_the_partition_of_a_newer_stored_record_halts_when_the_others_go_on(
        kafka_bootstrap: str, unique: str, tmp_path: Path) -> None:
    source, output, metrics = f"newer-in-{unique}", f"newer-out-{unique}", f"newer-metrics-{unique}"
    create_topics(kafka_bootstrap, [source, output], partitions=2)
    create_topics(kafka_bootstrap, [metrics], partitions=1)
    runner = EngineThread(_app(f"newer-{unique}", source, output, metrics=metrics),
                          settings(kafka_bootstrap, tmp_path, "newer", commit_every=1000,
                                   metrics_interval_ms=60_000)).start()  # a halt publishes at once
    try:
        _send(kafka_bootstrap, source, [(0, b"a0"), (1, b"b0"), (0, b"newer"), (0, b"a1"), (1, b"b1")])
        runner.wait_until(lambda: runner.engine.halted, 60)
        _send(kafka_bootstrap, source, [(1, b"b2"), (0, b"a2")])
        runner.wait_until(lambda: sorted(o["v"] for o in outputs(kafka_bootstrap, output)) == ["b0", "b1", "b2"]
                          and not runner.engine._txn.open, 60)
        halted = dict(runner.engine.halted)
        page = _health_page(kafka_bootstrap, metrics)
    finally:
        runner.stop()  # a halted partition does not stop the engine: stop() returns cleanly
    # the console's health page names the partition and why, from the engine's metrics record
    assert '<span id="halted-count">1</span>' in page and f'data-app="newer-{unique}"' in page
    assert 'data-partition="0"' in page and "stateFormat=99" in page and "upgrade this process" in page

    assert runner.error is None and list(halted) == [0] and runner.engine.stats.halts == 1
    assert "stateFormat=99" in halted[0] and "upgrade this process" in halted[0]
    committed = outputs(kafka_bootstrap, output)
    assert sorted(o["v"] for o in committed) == ["b0", "b1", "b2"]  # a0, before it in the batch, rolled back

    # the upgraded process takes the partition over and resumes it from its last commit
    upgraded = EngineThread(_app(f"newer-{unique}", source, output, upgraded=True),
                            settings(kafka_bootstrap, tmp_path, "newer", commit_every=1000)).start()
    try:
        upgraded.wait_until(lambda: len(outputs(kafka_bootstrap, output)) == 7, 60)
    finally:
        upgraded.stop()
    assert sorted(o["v"] for o in outputs(kafka_bootstrap, output) if o["p"] == 0) == ["a0", "a1", "a2", "newer"]


def _health_page(bootstrap: str, topic: str) -> str:
    """The console's health page as the dashboard builds it from the metrics topic (`MetricsFeed`)."""
    import time

    from runfacts.dashboard.console import health_page
    from runfacts.dashboard.feed import FeedSettings
    from runfacts.dashboard.health import MetricsFeed
    from runfacts.settings import KafkaSettings

    feed = MetricsFeed(KafkaSettings(bootstrap_servers=bootstrap), FeedSettings(topic))
    deadline = time.monotonic() + 30
    while not feed.halted() and time.monotonic() < deadline:
        for msg in read_all(bootstrap, topic):
            feed.take(msg)
    return health_page([], "", [], 0, [], feed.by_app(), None, feed.halted(), int(time.time() * 1000))
