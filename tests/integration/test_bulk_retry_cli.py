"""`runfacts retry --capability X --since T` against the real broker and the real run decider: each
retryable failed call of the capability is retried by its own audited command, the summary counts
the refusals, and the exit code is 3 when any was refused."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from decider_support import OPERATOR, claim, command, create, failed, propose_lookup
from engine_support import EngineThread, settings
from ops_support import Deployment, write_users
from typer.testing import CliRunner

from runfacts.cli import app
from runfacts.processors.policy.retry import args_hash, idempotency_key
from runfacts.schemas import commands as cmd

pytestmark = pytest.mark.integration
CAP = "orders.lookup"


@pytest.fixture(scope="module")
def deployment(kafka_bootstrap: str, tmp_path_factory: pytest.TempPathFactory):
    unique = uuid.uuid4().hex[:10]
    dep = Deployment.create(kafka_bootstrap, f"bulk{unique}")
    engine = EngineThread(dep.decider(), settings(kafka_bootstrap, tmp_path_factory.mktemp("decider") / "state",
                                                  f"bulk-{unique}")).start()
    yield dep
    engine.stop()


def _fail_lookup(deployment: Deployment, run: str, attempts: int) -> None:
    """A lookup that failed (transient, retryable) `attempts` times, retried by an operator in
    between, with the dispatcher's commands scripted. An attempt the decider dispatched at once
    (ADR 0011: it knows the partition's dispatcher from an earlier claim) is reported without a
    claim, under the request id the decider gave it."""
    key = idempotency_key(run, "lookup", "order-001", args_hash({"orderId": "order-001"}))
    deployment.send(create(run=run), propose_lookup("call-1", run=run))
    for attempt in range(1, attempts + 1):
        if attempt > 1:
            deployment.send(command(cmd.RetryToolCall, OPERATOR, run=run, toolCallId="call-1"))
        state = deployment.wait_state(run, lambda s, a=attempt: "call-1" in s.toolCalls and (
            (s.toolCalls["call-1"].execution == "dispatching" and s.toolCalls["call-1"].attempts == a) or (
                s.toolCalls["call-1"].execution == "authorized" and s.toolCalls["call-1"].attempts == a - 1)))
        call = state.toolCalls["call-1"]
        if call.execution == "dispatching":
            deployment.send(failed("call-1", attempt=attempt, error="transient", run=run,
                                   request=call.externalRequestId))
        else:
            deployment.send(claim("call-1", attempt=attempt, epoch=attempt, key=key, run=run),
                            failed("call-1", attempt=attempt, error="transient", run=run))
        deployment.wait_state(run, lambda s, a=attempt: s.toolCalls["call-1"].execution == "failed"
                              and s.toolCalls["call-1"].attempts == a)


def test_bulk_retry_retries_each_call_and_exits_3_when_one_is_refused(deployment: Deployment, tmp_path: Path) -> None:
    since = datetime.now(UTC) - timedelta(seconds=5)
    runs = {f"run-bulk-{uuid.uuid4().hex[:6]}": attempts for attempts in (1, 1, 3)}  # the last: attempts spent
    for run, attempts in runs.items():
        _fail_lookup(deployment, run, attempts)
    for run, attempts in runs.items():
        deployment.wait_state(run, lambda s, a=attempts: s.toolCalls["call-1"].execution == "failed"
                              and s.toolCalls["call-1"].attempts == a)
    users = write_users(tmp_path / "users.toml")

    result = CliRunner().invoke(app, ["retry", "--capability", CAP, "--since", since.isoformat()],
                                env={**deployment.env(users, "olga"), "COLUMNS": "200"})

    assert result.exit_code == 3, result.output
    assert "retried 2 of 3 calls of orders.lookup" in result.output and "refused 1: 1 max_attempts" in result.output
    for run, attempts in runs.items():
        state = deployment.wait_state(run, lambda s: True)
        expected = "failed" if attempts == 3 else "authorized"
        assert state.toolCalls["call-1"].execution == expected, (run, state.toolCalls["call-1"])
    again = CliRunner().invoke(app, ["retry", "--capability", CAP, "--since", datetime.now(UTC).isoformat()],
                               env={**deployment.env(users, "olga"), "COLUMNS": "200"})
    assert again.exit_code == 0 and "no retryable failed call of orders.lookup" in again.output
    bad = CliRunner().invoke(app, ["retry", "--capability", CAP], env=deployment.env(users, "olga"))
    assert bad.exit_code == 2 and "--since" in bad.output
