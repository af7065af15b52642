"""`runfacts dlq list|redrive` end to end: the decider dead-letters an oversized command; after
the fix (a larger limit) a redrive re-submits it, records that it did, and the decider decides it."""

from __future__ import annotations

from pathlib import Path

import pytest
from engine_support import EngineThread, settings
from typer.testing import CliRunner

from runfacts.cli import app
from runfacts.dev.crash.kafka import produce
from runfacts.dev.crash.workload import Commands, Input, valid
from runfacts.logread import read_to_end
from runfacts.processors.decider.app import DeciderShell, InputLimits
from runfacts.schemas import codec
from runfacts.settings import KafkaSettings
from runfacts.topics import TopicNames, apply_topics, runfacts_topics
from runfacts.workers import decide_context

pytestmark = pytest.mark.integration


def _run_decider(bootstrap: str, names: TopicNames, state: Path, limits: InputLimits, until) -> None:
    engine = EngineThread(DeciderShell(names, decide_context(), limits=limits).application(),
                          settings(bootstrap, state, "dlq-1", commit_interval_ms=50)).start()
    engine.wait_until(until, 60)
    engine.stop()


def test_redrive_resubmits_dead_letter_once_when_the_cause_was_fixed(
        kafka_bootstrap: str, unique: str, tmp_path: Path, monkeypatch) -> None:
    names = TopicNames(f"dlq{unique}")
    apply_topics(KafkaSettings(bootstrap_servers=kafka_bootstrap), runfacts_topics(names, 2))
    monkeypatch.setenv("RUNFACTS_KAFKA_BOOTSTRAP_SERVERS", kafka_bootstrap)
    c = Commands(unique)
    big = c.reasoning("run-1").model_copy()
    big = big.model_copy(update={"payload": big.payload.model_copy(update={"evidenceRefs": ("r" * 300,)})})
    produce(kafka_bootstrap, names.commands, [valid(c.create("run-1")), valid(big),
                                              Input(b"run-1", b"\xc3\x01garbage")])
    dead = lambda: len(read_to_end(kafka_bootstrap, [names.dlq])[names.dlq])  # noqa: E731
    _run_decider(kafka_bootstrap, names, tmp_path, InputLimits(max_text_chars=200), lambda: dead() == 2)

    runner = CliRunner()
    listed = runner.invoke(app, ["dlq", "list", "--prefix", names.prefix, "--json"])
    assert listed.exit_code == 0, listed.output
    assert "oversized: field payload.evidenceRefs[0] has 300 characters (limit 200)" in listed.output
    assert "not a runfacts record" in listed.output and f"{names.prefix}-run-decider" in listed.output

    refused = runner.invoke(app, ["dlq", "redrive", "--prefix", names.prefix])
    assert refused.exit_code != 0
    first = runner.invoke(app, ["dlq", "redrive", "--prefix", names.prefix, "--filter", "error=oversized"])
    again = runner.invoke(app, ["dlq", "redrive", "--prefix", names.prefix, "--filter", "error=oversized"])
    assert "redrove 1 dead letter(s)" in first.output and "redrove 0 dead letter(s)" in again.output
    shown = runner.invoke(app, ["dlq", "list", "--prefix", names.prefix])
    assert "1 redriven" in shown.output

    events = lambda: [codec.decode(r.value).eventType  # noqa: E731
                      for r in read_to_end(kafka_bootstrap, [names.events])[names.events]]
    _run_decider(kafka_bootstrap, names, tmp_path, InputLimits(), lambda: "reasoning.recorded" in events())
    assert events().count("reasoning.recorded") == 1
    resubmitted = [r for r in read_to_end(kafka_bootstrap, [names.commands])[names.commands]
                   if any(k == "dlq.redrivenFrom" for k, _ in r.headers)]
    assert len(resubmitted) == 1 and resubmitted[0].value == codec.encode(big)


def test_redrive_sends_a_wrong_partition_letter_to_its_runs_partition_where_it_is_decided(
        kafka_bootstrap: str, unique: str, tmp_path: Path, monkeypatch) -> None:
    """A create produced to another partition than its run's (a CRC32 producer) is dead-lettered
    (`wrong_partition`); `dlq redrive --filter reason=wrong_partition` sends it to its key's
    partition (not back where it was refused), and the run's owner decides it."""
    from confluent_kafka import Producer

    from runfacts.partitioning import partition_for

    names = TopicNames(f"dlw{unique}")
    apply_topics(KafkaSettings(bootstrap_servers=kafka_bootstrap), runfacts_topics(names, 2))
    monkeypatch.setenv("RUNFACTS_KAFKA_BOOTSTRAP_SERVERS", kafka_bootstrap)
    run = f"run-w{unique}"
    record = valid(Commands(unique).create(run))
    elsewhere = 1 - partition_for(run.encode(), 2)
    producer = Producer({"bootstrap.servers": kafka_bootstrap})
    producer.produce(names.commands, record.value, record.key, partition=elsewhere, headers=list(record.headers))
    assert producer.flush(30) == 0
    dead = lambda: len(read_to_end(kafka_bootstrap, [names.dlq])[names.dlq])  # noqa: E731
    _run_decider(kafka_bootstrap, names, tmp_path, InputLimits(), lambda: dead() == 1)

    redrove = CliRunner().invoke(app, ["dlq", "redrive", "--prefix", names.prefix, "--filter",
                                       "reason=wrong_partition"])
    assert "redrove 1 dead letter(s)" in redrove.output, redrove.output

    created = lambda: [r for r in read_to_end(kafka_bootstrap, [names.events])[names.events]  # noqa: E731
                       if codec.decode(r.value).eventType == "run.created"]
    _run_decider(kafka_bootstrap, names, tmp_path, InputLimits(), lambda: len(created()) == 1)
    assert [r.partition for r in created()] == [1 - elsewhere] and dead() == 2  # the letter + its marker
