"""Replay, audit verification and trajectory export against the real broker."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from fastavro import reader as avro_reader
from typer.testing import CliRunner

from runfacts.cli import app
from runfacts.dev.runscript import RunScript, encode_event, produce_log
from runfacts.logread import batches, log_range
from runfacts.partitioning import partition_for
from runfacts.projections.audit import reducer as audit
from runfacts.projections.eventlog import EventReader
from runfacts.projections.facts import ReadSettings
from runfacts.projections.projector.replay import AuditProjector, ReplaySettings, replay
from runfacts.projections.sinks import TopicSink
from runfacts.schemas.errors import ConfigError
from runfacts.settings import KafkaSettings
from runfacts.topics import TopicNames, TopicSpec, apply_topics, delete_topics, runfacts_topics

pytestmark = pytest.mark.integration
PARTITIONS = 3
RUNS = 24
runner = CliRunner()


@pytest.fixture
def log(kafka_bootstrap: str, unique: str, monkeypatch: pytest.MonkeyPatch):
    """A scripted log of RUNS runs in a fresh `p<unique>.run.events` (3 partitions)."""
    kafka = KafkaSettings(bootstrap_servers=kafka_bootstrap, topic_prefix=f"p{unique}")
    names = TopicNames(kafka.topic_prefix)
    specs = runfacts_topics(names, PARTITIONS)
    apply_topics(kafka, specs)
    events = list(RunScript(seed=21).log(RUNS))
    produce_log(kafka, names.events, events, PARTITIONS)
    monkeypatch.setenv("RUNFACTS_KAFKA_BOOTSTRAP_SERVERS", kafka_bootstrap)
    monkeypatch.setenv("RUNFACTS_KAFKA_TOPIC_PREFIX", names.prefix)
    created: list[str] = [s.name for s in specs]
    yield kafka, names, events, created
    delete_topics(kafka, created)


def _records(kafka: KafkaSettings, topic: str) -> dict[int, list[tuple[bytes, bytes | None]]]:
    out: dict[int, list[tuple[bytes, bytes | None]]] = {}
    for batch in batches(kafka, log_range(kafka, topic)):
        for m in batch:
            out.setdefault(m.partition(), []).append((m.key(), m.value()))
    return out


@pytest.mark.parametrize("projection", ["audit", "trajectory", "user-view"])
def test_replay_writes_byte_identical_directories_when_the_log_is_replayed_twice(
        log, tmp_path: Path, projection: str) -> None:
    kafka, names, events, _ = log
    reports = [replay(kafka, ReplaySettings(projection, f"{tmp_path}/r{i}/", names.events))
               for i in (1, 2)]
    first, second = (sorted((tmp_path / f"r{i}").iterdir()) for i in (1, 2))
    assert [p.name for p in first] == [p.name for p in second]
    assert all(a.read_bytes() == b.read_bytes() for a, b in zip(first, second, strict=True))
    rows = [row for p in first if p.suffix == ".avro" for row in avro_reader(p.open("rb"))]
    expected = len(events) if projection == "audit" else len(
        {e["runId"] for e in events} - ({e["runId"] for e in events
                                         if e["eventType"] == "run.archived"}
                                        if projection == "user-view" else set()))
    assert len(rows) == reports[0].records == expected
    manifest = json.loads((tmp_path / "r1" / "manifest.json").read_text())
    assert manifest["source"]["topic"] == names.events and manifest["projection"] == projection


def test_replay_writes_identical_topics_when_replayed_twice_into_fresh_topics(log) -> None:
    kafka, names, events, created = log
    targets = [f"{names.audit}.r1", f"{names.audit}.r2"]
    created += targets
    for target in targets:
        replay(kafka, ReplaySettings("audit", target, names.events))
    first, second = (_records(kafka, t) for t in targets)
    assert first == second
    assert sum(len(v) for v in first.values()) == len(events)
    for partition, records in first.items():  # each run's records sit with its events
        assert {partition_for(k, PARTITIONS) for k, _ in records} == {partition}


def test_replay_refuses_a_target_topic_that_already_holds_records(log) -> None:
    kafka, names, _, created = log
    target = f"{names.audit}.once"
    created.append(target)
    replay(kafka, ReplaySettings("audit", target, names.events))
    with pytest.raises(ConfigError, match="already holds records"):
        replay(kafka, ReplaySettings("audit", target, names.events))


def test_replay_from_an_offset_reads_only_the_rest_of_each_partition(log, tmp_path) -> None:
    kafka, names, events, _ = log
    report = replay(kafka, ReplaySettings("audit", f"{tmp_path}/suffix/", names.events, 10))
    assert report.events == len(events) - 10 * PARTITIONS
    assert report.source.start == dict.fromkeys(range(PARTITIONS), 10)


def test_audit_verify_cli_passes_when_the_audit_was_built_from_the_log(log) -> None:
    kafka, names, events, _ = log
    replay(kafka, ReplaySettings("audit", names.audit, names.events))
    result = runner.invoke(app, ["audit", "verify"])
    assert result.exit_code == 0, result.output
    assert f"OK ({len(events)} events, {len(events)} audit records, {RUNS} runs" in result.output
    one = events[0]["runId"]
    result = runner.invoke(app, ["audit", "verify", "--run", one])
    assert result.exit_code == 0 and "1 runs verified" in result.output


def test_audit_verify_cli_reports_the_link_when_an_event_byte_was_changed(log) -> None:
    kafka, names, events, created = log
    tampered_events, tampered_audit = f"{names.events}.t", f"{names.audit}.t"
    created += [tampered_events, tampered_audit]
    apply_topics(kafka, [TopicSpec(tampered_events, PARTITIONS)])
    _audit_into(kafka, tampered_audit, tampered_events, events)  # audited while intact
    values = [encode_event(e) for e in events]
    victim = 40
    changed = bytearray(values[victim])
    changed[-3] ^= 0x01
    values[victim] = bytes(changed)
    _produce_values(kafka, tampered_events, events, values)
    result = runner.invoke(app, ["audit", "verify", "--events-topic", tampered_events,
                                 "--audit-topic", tampered_audit])
    assert result.exit_code == 1
    run = events[victim]["runId"]
    sequence = sum(1 for e in events[:victim + 1] if e["runId"] == run)
    assert f"run {run} seq {sequence}: mismatch" in result.output
    assert "eventHash" in result.output and "FAILED: 1 run(s)" in result.output


def test_audit_verify_cli_reports_a_broken_chain_when_an_audit_record_is_missing(log) -> None:
    kafka, names, events, created = log
    replay(kafka, ReplaySettings("audit", names.audit, names.events))
    copy = f"{names.audit}.gap"
    created.append(copy)
    apply_topics(kafka, [TopicSpec(copy, PARTITIONS)])
    records = _records(kafka, names.audit)
    dropped = audit.decode(records[0][5][1][10:])
    sink = TopicSink(kafka, TopicSpec(copy, PARTITIONS), audit.schema())
    for partition, rows in records.items():
        for i, (key, value) in enumerate(rows):
            if (partition, i) != (0, 5):
                sink.write(partition, key.decode(), value[10:])
    sink.close(log_range(kafka, names.events))
    result = runner.invoke(app, ["audit", "verify", "--audit-topic", copy])
    assert result.exit_code == 1
    assert f"run {dropped.run_id} seq {dropped.sequence + 1}: broken" in result.output


def _audit_into(kafka: KafkaSettings, topic: str, events_topic: str, events) -> None:
    """Audit records of the intact events, as if read from `events_topic` (same layout)."""
    reader = EventReader(ReadSettings(decode=False))
    sink = TopicSink(kafka, TopicSpec(topic, PARTITIONS), audit.schema())
    projector, offsets = AuditProjector(), dict.fromkeys(range(PARTITIONS), 0)
    for event in events:
        partition = partition_for(event["runId"].encode(), PARTITIONS)
        fact = reader.fact(encode_event(event), events_topic, partition, offsets[partition])
        offsets[partition] += 1
        projector.apply(fact, sink.write)
    sink.close(log_range(kafka, events_topic))


def _produce_values(kafka: KafkaSettings, topic: str, events, values) -> None:
    from confluent_kafka import Producer

    producer = Producer(kafka.client_config(**{"enable.idempotence": True}))
    for event, value in zip(events, values, strict=True):
        key = event["runId"].encode()
        producer.produce(topic, value, key, partition=partition_for(key, PARTITIONS))
    assert producer.flush(30) == 0


def test_trajectories_export_gives_the_same_file_when_read_from_topic_or_events(
        log, tmp_path: Path) -> None:
    kafka, names, events, _ = log
    replay(kafka, ReplaySettings("trajectory", names.trajectory, names.events))
    from_topic, from_events = tmp_path / "topic.jsonl", tmp_path / "events.jsonl"
    assert runner.invoke(app, ["trajectories", "export", "--out", str(from_topic)]).exit_code == 0
    result = runner.invoke(app, ["trajectories", "export", "--out", str(from_events),
                                 "--from-events"])
    assert result.exit_code == 0, result.output
    assert from_topic.read_bytes() == from_events.read_bytes()
    lines = [json.loads(line) for line in from_topic.read_text().splitlines()]
    assert [t["runId"] for t in lines] == sorted({e["runId"] for e in events})
    assert {t["formatVersion"] for t in lines} == {2}  # format 2: graph steps
    avro_out = tmp_path / "t.avro"
    assert runner.invoke(app, ["trajectories", "export", "--out", str(avro_out), "--format",
                               "avro"]).exit_code == 0
    assert [r["runId"] for r in avro_reader(avro_out.open("rb"))] == [t["runId"] for t in lines]


def test_replay_cli_reports_counts_when_rebuilding_into_a_directory(log, tmp_path) -> None:
    _, _, events, _ = log
    result = runner.invoke(app, ["replay", "--projection", "audit", "--into",
                                 f"{tmp_path}/cli/", "--quiet"])
    assert result.exit_code == 0, result.output
    assert f"{len(events)} events -> {len(events)} audit records" in result.output
