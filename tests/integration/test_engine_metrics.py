"""The engine publishes its metrics record (commit latency, batch sizes, lag) to the metrics topic."""

from __future__ import annotations

import dataclasses
import json
import time
from pathlib import Path

import pytest
from engine_support import EngineThread, create_topics, produce, read_all, settings

from runfacts.dev.apps import counter_app
from runfacts.metrics import decode

pytestmark = pytest.mark.integration


def test_engine_publishes_commit_latency_and_batch_sizes_to_the_metrics_topic_every_interval(
        kafka_bootstrap: str, unique: str, tmp_path: Path) -> None:
    topics = [f"met-in-{unique}", f"met-out-{unique}", f"met-dlq-{unique}"]
    create_topics(kafka_bootstrap, topics, partitions=2)
    create_topics(kafka_bootstrap, [f"met-metrics-{unique}"], partitions=1)
    app = dataclasses.replace(counter_app(name=f"met-{unique}", source=topics[0], output=topics[1],
                                          dead_letter_topic=topics[2]), metrics_topic=f"met-metrics-{unique}")
    runner = EngineThread(app, settings(kafka_bootstrap, tmp_path, "m1", metrics_interval_ms=300)).start()
    runner.wait_until(lambda: runner.engine.partitions == [0, 1])
    produce(kafka_bootstrap, topics[0], [(f"k{i}".encode(), b"x") for i in range(40)])
    runner.wait_until(lambda: runner.engine.stats.processed >= 40 and runner.engine.stats.commits >= 1, 30)
    time.sleep(1.0)  # at least two more intervals
    runner.stop()
    assert runner.error is None

    records = [(m.key(), decode(m.value())) for m in read_all(kafka_bootstrap, f"met-metrics-{unique}")]
    assert len(records) >= 3 and {k for k, _ in records} == {f"met-{unique}/m1".encode()}
    measured = [r for _k, r in records if r["commitLatencyMs"] is not None]
    assert measured, json.dumps([r for _k, r in records])
    assert 1 <= sum(r["commits"] for _k, r in records) <= runner.engine.stats.commits
    assert sum(r["processed"] for _k, r in records) == 40
    first = measured[0]
    assert 0 < first["commitLatencyMs"]["p50"] <= first["commitLatencyMs"]["p99"] <= first["commitLatencyMs"]["max"]
    assert first["batchRecords"]["max"] >= 1 and first["app"] == f"met-{unique}"
    assert {(x["topic"], x["partition"]) for x in records[-1][1]["lag"]} == {(topics[0], 0), (topics[0], 1)}
    assert all(x["lag"] == 0 for x in records[-1][1]["lag"])  # everything was consumed


def test_engine_publishes_no_metrics_when_the_interval_is_zero(
        kafka_bootstrap: str, unique: str, tmp_path: Path) -> None:
    topics = [f"met0-in-{unique}", f"met0-out-{unique}", f"met0-dlq-{unique}"]
    create_topics(kafka_bootstrap, topics, partitions=1)
    create_topics(kafka_bootstrap, [f"met0-metrics-{unique}"], partitions=1)
    app = dataclasses.replace(counter_app(name=f"met0-{unique}", source=topics[0], output=topics[1],
                                          dead_letter_topic=topics[2]), metrics_topic=f"met0-metrics-{unique}")
    runner = EngineThread(app, settings(kafka_bootstrap, tmp_path, "m0", metrics_interval_ms=0)).start()
    runner.wait_until(lambda: runner.engine.partitions == [0])
    produce(kafka_bootstrap, topics[0], [(b"k", b"x")])
    runner.wait_until(lambda: runner.engine.stats.commits >= 1, 30)
    time.sleep(0.5)
    runner.stop()
    assert read_all(kafka_bootstrap, f"met0-metrics-{unique}") == []
