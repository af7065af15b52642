"""Run-end hygiene on the real broker: a grant used after its run completed is refused."""

from __future__ import annotations

from pathlib import Path

import pytest
from decider_support import CTX, RUN, claim, command, create, propose_refund, resume
from engine_support import EngineThread, produce, read_all, settings

from runfacts.processors.decider.app import DeciderShell
from runfacts.schemas import codec
from runfacts.schemas import commands as cmd
from runfacts.settings import KafkaSettings
from runfacts.topics import TopicNames, apply_topics, runfacts_topics

pytestmark = pytest.mark.integration


def _events(bootstrap: str, names: TopicNames) -> list:
    return [codec.decode(m.value()) for m in read_all(bootstrap, names.events, timeout=2)]


def test_claim_is_refused_grant_revoked_when_the_run_completed_on_the_broker(
        kafka_bootstrap: str, unique: str, tmp_path: Path) -> None:
    names = TopicNames(f"runend{unique}")
    apply_topics(KafkaSettings(bootstrap_servers=kafka_bootstrap), runfacts_topics(names))
    late_claim = claim()
    commands = [create(), propose_refund(), resume(), command(cmd.CompleteRun, outcomeRef="outcome-1"),
                late_claim]
    produce(kafka_bootstrap, names.commands, [(c.runId.encode(), codec.encode(c)) for c in commands])
    engine = EngineThread(DeciderShell(names, CTX).application(),
                          settings(kafka_bootstrap, tmp_path / "state", "runend-1")).start()
    engine.wait_until(lambda: any(e.causationId == late_claim.commandId
                                  for e in _events(kafka_bootstrap, names)), 60)
    engine.stop()

    events = [e for e in _events(kafka_bootstrap, names) if e.runId == RUN]
    types = [e.eventType for e in events]
    assert types[-5:] == ["run.completed", "checkpoint.saved", "grant.revoked", "checkpoint.archived",
                          "command.rejected"]
    revoked, rejected = events[-3].payload, events[-1].payload
    assert (revoked.grantKind, revoked.approvalId, revoked.reason) == (
        "approval", "approval-tool-call-031", "run_completed")
    assert (rejected.commandType, rejected.reasonCode) == ("tool.call.claim", "grant_revoked")
    assert "tool.call.dispatching" not in types
