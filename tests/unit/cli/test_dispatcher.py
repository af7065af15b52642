"""`runfacts dispatcher put-args` and the command outbox the demo's harness uses."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from decider_support import AGENT, REFUND_ARGS, command
from typer.testing import CliRunner

from runfacts.cli import app
from runfacts.connectors.args_store import ArgsStore
from runfacts.connectors.outbox.commands import CommandOutbox
from runfacts.connectors.outbox.store import OutboxStore
from runfacts.schemas import codec
from runfacts.schemas import commands as cmd
from runfacts.topics import TopicNames

runner = CliRunner()


def test_put_args_prints_ref_and_hash_when_given_a_json_object(tmp_path: Path) -> None:
    db = str(tmp_path / "h.db")
    result = runner.invoke(app, ["dispatcher", "put-args", "--args-store", db, json.dumps(REFUND_ARGS)])
    assert result.exit_code == 0, result.output
    printed = json.loads(result.output)
    assert ArgsStore.open(db).load_verified(printed["argsRef"], printed["argsHash"]) == REFUND_ARGS
    bad = runner.invoke(app, ["dispatcher", "put-args", "--args-store", db, "[1, 2]"])
    assert bad.exit_code != 0 and "JSON object" in bad.output


def test_propose_stores_arguments_and_queues_the_proposal_in_one_transaction(tmp_path: Path) -> None:
    harness = CommandOutbox.open(tmp_path / "h.db", TopicNames("t"))
    stored = harness.propose(_proposal, REFUND_ARGS)
    (row,) = OutboxStore.open(str(tmp_path / "h.db"), "runfacts_outbox").fetch_pending(10)
    command = codec.decode(row.value)
    assert (row.topic, row.run_id, row.event_id) == ("t.run.commands", command.runId, command.commandId)
    assert (command.payload.argsRef, command.payload.argsHash) == stored


def test_propose_keeps_no_arguments_when_the_proposal_cannot_be_built(tmp_path: Path) -> None:
    harness = CommandOutbox.open(tmp_path / "h.db", TopicNames("t"))
    with pytest.raises(ZeroDivisionError):
        harness.propose(lambda ref, digest: 1 / 0, {"orderId": "order-009"})
    assert harness.conn.execute("SELECT count(*) FROM runfacts_args").fetchone() == (0,)
    assert OutboxStore.open(str(tmp_path / "h.db"), "runfacts_outbox").fetch_pending(10) == []


def _proposal(ref: str, digest: str) -> cmd.ProposeToolCall:
    return command(cmd.ProposeToolCall, AGENT, toolCallId="tool-call-031", capabilityId="payments.refund",
                   argsHash=digest, argsRef=ref, target="order-001", action="refund", risk="high",
                   summary="Refund")
