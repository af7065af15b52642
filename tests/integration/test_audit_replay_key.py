"""The auditor's proof agrees with itself (issue 33 item 7), on the real broker: with
RUNFACTS_AUDIT_PII_KEY set, the live projector's audit topic and `runfacts replay --projection
audit` (and the library's `replay`) are byte-identical, and `audit verify` with the key passes
on the replay."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from engine_support import EngineThread, settings
from typer.testing import CliRunner

from runfacts.cli import app
from runfacts.dev.runscript import RunScript, produce_log
from runfacts.logread import batches, log_range
from runfacts.projections.projector.app import app_name
from runfacts.projections.projector.replay import ReplaySettings, replay
from runfacts.settings import KafkaSettings
from runfacts.topics import TopicNames, apply_topics, delete_topics, runfacts_topics
from runfacts.workers import projector as projector_app

pytestmark = pytest.mark.integration
PARTITIONS = 3
RUNS = 8
KEY = "audit-key-for-the-replay-test-0123456789"
runner = CliRunner()
Rows = dict[int, list[tuple[bytes, bytes]]]


@pytest.fixture(scope="module")
def projected(kafka_bootstrap: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """A scripted log projected live by the projector worker started with the audit key."""
    kafka = KafkaSettings(bootstrap_servers=kafka_bootstrap, topic_prefix=f"ak{uuid.uuid4().hex[:10]}")
    names = TopicNames(kafka.topic_prefix)
    specs = runfacts_topics(names, PARTITIONS)
    apply_topics(kafka, specs)
    events = list(RunScript(seed=41).log(RUNS))
    produce_log(kafka, names.events, events, PARTITIONS)
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("RUNFACTS_AUDIT_PII_KEY", KEY)
        application = projector_app(prefix=names.prefix)
    engine = EngineThread(application, settings(kafka_bootstrap, tmp_path_factory.mktemp("projector"),
                                                "projector-key")).start()
    created = [s.name for s in specs] + [f"{app_name(names.prefix)}-{s}-changelog"
                                         for s in ("heads", "trajectories", "__timers")]
    try:
        engine.wait_until(lambda: engine.engine.stats.processed >= len(events), timeout=60)
        engine.stop()
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
    monkeypatch.setenv("RUNFACTS_AUDIT_PII_KEY", KEY)


def test_cli_replay_equals_the_live_audit_and_verifies_when_the_audit_key_is_set(projected, monkeypatch) -> None:
    kafka, names, events, created = projected
    _env(monkeypatch, kafka)
    live = _records(kafka, names.audit)
    assert any(b"hmac-sha256:" in value for rows in live.values() for _, value in rows), "the live audit is keyed"
    rebuilt = f"{names.audit}.replay-cli"
    created.append(rebuilt)

    done = runner.invoke(app, ["replay", "--projection", "audit", "--into", rebuilt, "--quiet"])

    assert done.exit_code == 0, done.output
    assert _records(kafka, rebuilt) == live
    verified = runner.invoke(app, ["audit", "verify", "--audit-topic", rebuilt])
    assert verified.exit_code == 0, verified.output
    assert f"OK ({len(events)} events, {len(events)} audit records, {RUNS} runs verified)" in verified.output


def test_library_replay_reads_the_live_projectors_key_when_none_is_given(projected, monkeypatch) -> None:
    kafka, names, _, created = projected
    _env(monkeypatch, kafka)
    rebuilt = f"{names.audit}.replay-lib"
    created.append(rebuilt)

    replay(kafka, ReplaySettings("audit", rebuilt, names.events))

    assert _records(kafka, rebuilt) == _records(kafka, names.audit)
