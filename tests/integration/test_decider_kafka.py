"""The run decider on the engine against the real broker: commands -> events + state, exactly once."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from decider_support import CTX, RUN, claim, command, completed, create, propose_refund, resume, unknown
from engine_support import EngineThread, produce, read_all, settings

from runfacts.processors.decider.app import DeciderShell
from runfacts.processors.decider.evolve import fold
from runfacts.processors.decider.state import DIGEST_CHARS, command_digest
from runfacts.schemas import codec
from runfacts.schemas import commands as cmd
from runfacts.settings import KafkaSettings
from runfacts.topics import TopicNames, apply_topics, runfacts_topics

pytestmark = pytest.mark.integration


def _commands():
    return [create(), propose_refund(), resume(), claim(), unknown(),
            command(cmd.ReportReconciled, toolCallId="tool-call-031",
                    externalRequestId="payment-request-tool-call-031-1", outcome="found_completed"),
            completed()]  # a late duplicate callback: rejected, never applied


def _last_command_in_state(bootstrap: str, names: TopicNames) -> str | None:
    """The digest of the newest command in the run's last published state (states are written per
    batch): the last entry of its dedupe window."""
    records = read_all(bootstrap, names.state, timeout=2)
    return json.loads(records[-1].value())["recentCommandDigests"][-DIGEST_CHARS:] if records else None


def test_decider_turns_commands_into_events_and_state_when_run_on_the_broker(
        kafka_bootstrap: str, unique: str, tmp_path: Path) -> None:
    names = TopicNames(f"dec{unique}")
    apply_topics(KafkaSettings(bootstrap_servers=kafka_bootstrap), runfacts_topics(names))
    commands = _commands()
    produce(kafka_bootstrap, names.commands, [(c.runId.encode(), codec.encode(c)) for c in commands])
    engine = EngineThread(DeciderShell(names, CTX).application(),
                          settings(kafka_bootstrap, tmp_path / "state", "dec-1")).start()
    last = command_digest(commands[-1].commandId)
    engine.wait_until(lambda: _last_command_in_state(kafka_bootstrap, names) == last, 60)
    engine.stop()

    events = [codec.decode(m.value()) for m in read_all(kafka_bootstrap, names.events)]
    types = [e.eventType for e in events]
    assert types[-4:] == ["tool.call.reconciliation_requested", "tool.call.reconciled",
                          "verification.updated", "command.rejected"]
    assert len({e.eventId for e in events}) == len(events), "no duplicate eventId"
    assert all(e.runId == RUN for e in events)
    oracle = fold(None, events)
    states = [json.loads(m.value()) for m in read_all(kafka_bootstrap, names.state)]
    assert states[-1]["version"] == oracle.version
    assert states[-1]["toolCalls"]["tool-call-031"]["execution"] == "completed"
    assert events[-1].payload.reasonCode == "duplicate_report"
