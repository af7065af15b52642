"""The live projector on the real broker: its audit topic verifies, equals a replay, and a
tampered copy fails verification; its trajectory topic exports like the events log folded."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from engine_support import EngineThread, settings
from typer.testing import CliRunner

from runfacts.cli import app
from runfacts.dev.runscript import RunScript, produce_log
from runfacts.logread import batches, log_range
from runfacts.projections.audit import reducer as audit
from runfacts.projections.projector.app import app_name
from runfacts.projections.projector.replay import ReplaySettings, replay
from runfacts.projections.sinks import TopicSink
from runfacts.settings import KafkaSettings
from runfacts.topics import TopicNames, TopicSpec, apply_topics, delete_topics, runfacts_topics
from runfacts.workers import projector as projector_app

pytestmark = pytest.mark.integration
PARTITIONS = 3
RUNS = 10
runner = CliRunner()
Rows = dict[int, list[tuple[bytes, bytes]]]


@pytest.fixture(scope="module")
def projected(kafka_bootstrap: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """A scripted log in fresh topics, projected live by the projector worker until caught up."""
    kafka = KafkaSettings(bootstrap_servers=kafka_bootstrap, topic_prefix=f"pl{uuid.uuid4().hex[:10]}")
    names = TopicNames(kafka.topic_prefix)
    specs = runfacts_topics(names, PARTITIONS)
    apply_topics(kafka, specs)
    events = list(RunScript(seed=33).log(RUNS))
    produce_log(kafka, names.events, events, PARTITIONS)
    state_dir = tmp_path_factory.mktemp("projector")
    engine = EngineThread(projector_app(prefix=names.prefix),
                          settings(kafka_bootstrap, state_dir, "projector-1")).start()
    created = [s.name for s in specs] + [f"{app_name(names.prefix)}-{s}-changelog"
                                         for s in ("heads", "trajectories", "__timers")]
    try:
        engine.wait_until(lambda: engine.engine.stats.processed >= len(events), timeout=60)
        engine.stop()  # commits what it processed
        yield kafka, names, events, created
    finally:
        engine.engine.stop()
        delete_topics(kafka, created)


def _records(kafka: KafkaSettings, topic: str) -> Rows:
    out: Rows = {}
    for batch in batches(kafka, log_range(kafka, topic)):
        for m in batch:
            out.setdefault(m.partition(), []).append((m.key(), m.value()))
    return out


def _env(monkeypatch: pytest.MonkeyPatch, kafka: KafkaSettings) -> None:
    monkeypatch.setenv("RUNFACTS_KAFKA_BOOTSTRAP_SERVERS", kafka.bootstrap_servers)
    monkeypatch.setenv("RUNFACTS_KAFKA_TOPIC_PREFIX", kafka.topic_prefix)
    monkeypatch.delenv("RUNFACTS_AUDIT_PII_KEY", raising=False)


def test_projector_audit_verifies_and_equals_a_replay_when_projected_live(projected, monkeypatch) -> None:
    kafka, names, events, created = projected
    _env(monkeypatch, kafka)

    result = runner.invoke(app, ["audit", "verify"])

    assert result.exit_code == 0, result.output
    assert f"OK ({len(events)} events, {len(events)} audit records, {RUNS} runs verified)" in result.output
    rebuilt = f"{names.audit}.rebuilt"
    created.append(rebuilt)
    replay(kafka, ReplaySettings("audit", rebuilt, names.events))
    assert _records(kafka, names.audit) == _records(kafka, rebuilt)


def test_audit_verify_fails_when_a_copy_of_the_live_audit_has_one_changed_record(projected, monkeypatch) -> None:
    kafka, names, _, created = projected
    _env(monkeypatch, kafka)
    copy = f"{names.audit}.tampered"
    created.append(copy)
    records = _records(kafka, names.audit)
    victim = audit.decode(records[1][3][1][10:])
    forged = victim._replace(offset=victim.offset + 1)  # points at another event; hashes left as they were
    sink = TopicSink(kafka, TopicSpec(copy, PARTITIONS), audit.schema())
    for partition, rows in records.items():
        for i, (key, value) in enumerate(rows):
            sink.write(partition, key.decode(), audit.encode(forged) if (partition, i) == (1, 3) else value[10:])
    sink.close(log_range(kafka, names.events))

    result = runner.invoke(app, ["audit", "verify", "--audit-topic", copy])

    assert result.exit_code == 1
    assert f"run {victim.run_id} seq {victim.sequence}: broken" in result.output
    assert "FAILED: 1 run(s)" in result.output


def test_projector_trajectories_export_like_the_folded_log_when_projected_live(
        projected, monkeypatch, tmp_path: Path) -> None:
    kafka, _, events, _ = projected
    _env(monkeypatch, kafka)
    from_topic, from_events = tmp_path / "topic.jsonl", tmp_path / "events.jsonl"

    assert runner.invoke(app, ["trajectories", "export", "--out", str(from_topic)]).exit_code == 0
    assert runner.invoke(app, ["trajectories", "export", "--out", str(from_events), "--from-events"]).exit_code == 0

    assert from_topic.read_bytes() == from_events.read_bytes()
    assert len(from_topic.read_text().splitlines()) == RUNS
