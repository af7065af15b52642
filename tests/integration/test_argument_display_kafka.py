"""Issue 33 items 2-4 on the real broker: the approver sees the arguments (names, values, units;
personal fields masked), the approval rule asks only above its threshold, invalid arguments are
rejected at propose time before anyone is asked, and an agent whose display lies about the amount
is refused by the dispatcher as a fact (tool.call.failed args_mismatch), nothing executed."""

from __future__ import annotations

import json
import sqlite3
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from tools_support import REPO, ToolStack

from runfacts.client import CommandRejected, Runfacts
from runfacts.client.approvals import Approval, UiSettings, display_lines
from runfacts.client.client import ClientSettings
from runfacts.demo.stack import DemoOptions
from runfacts.processors.policy.display import render
from runfacts.schemas import commands as cmd
from runfacts.settings import KafkaSettings

pytestmark = pytest.mark.integration
TOOLS = f"{REPO}/tests/integration/display_tools.py:registry"


@pytest.fixture(scope="module")
def stack(kafka_bootstrap: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ToolStack]:
    options = DemoOptions(prefix=f"ad-{uuid.uuid4().hex[:10]}", workdir=tmp_path_factory.mktemp("display"),
                          partitions=2, approval_ttl_ms=120_000, kafka=KafkaSettings(bootstrap_servers=kafka_bootstrap))
    stack = ToolStack(options, tools=TOOLS)
    try:
        stack.start()
        yield stack
    finally:
        stack.stop()


@pytest.fixture(scope="module")
def rf(stack: ToolStack) -> Iterator[Runfacts]:
    from display_tools import registry

    settings = ClientSettings(ui=UiSettings(signing_env=stack.options.signing_env))
    client = Runfacts.connect(kafka=stack.options.kafka, prefix=stack.names.prefix, args_store=stack.dir / "harness.db",
                              settings=settings, capabilities=registry)
    yield client
    client.close()


def credits(stack: ToolStack, account: str) -> list[int]:
    with sqlite3.connect(stack.dir / "ledger.db") as db:
        db.execute("CREATE TABLE IF NOT EXISTS credits (idempotency_key TEXT PRIMARY KEY, account TEXT,"
                   " amount_cents INTEGER)")
        return [r[0] for r in db.execute("SELECT amount_cents FROM credits WHERE account = ?", (account,))]


def pending(rf: Runfacts, run_id: str, timeout: float = 90) -> Approval:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = [a for a in rf.approvals(role="support_agent") if a.run_id == run_id]
        if found:
            return found[0]
        time.sleep(0.2)
    raise AssertionError(f"no pending approval for {run_id}")


def credit_args(account: str, amount: int) -> dict[str, Any]:
    return {"account": account, "amount_cents": amount, "customer": "Ada Lovelace"}


def test_the_approver_sees_the_amount_and_the_approved_credit_runs(stack: ToolStack, rf: Runfacts,
                                                                   unique: str) -> None:
    account = f"acct-{int(unique, 16) % 10**8}"
    run = rf.start_run(goal="ticket:T-33", summary="Credit the outage", user_id="customer-7")
    call = run.propose("billing.issue_credit", credit_args(account, 9_000), target=account)
    approval = pending(rf, run.id)
    assert display_lines(approval.display) == [f'account = "{account}"', "amount_cents = 9000 cents",
                                               "customer = [personal] (personal)"]
    assert approval.display_digest and rf.state(run.id).toolCalls[call.id].displayDigest == approval.display_digest
    rf.decide(approval, "approve", approver="alice", timeout=90)
    assert call.result(timeout=120) == {"account": account, "amount_cents": 9_000}
    assert credits(stack, account) == [9_000]


def test_a_small_credit_is_authorized_at_once_by_the_rule(stack: ToolStack, rf: Runfacts, unique: str) -> None:
    account = f"acct-{int(unique, 16) % 10**8 + 1}"
    run = rf.start_run(goal="ticket:T-33", summary="Credit the outage", user_id="customer-7")
    call = run.propose("billing.issue_credit", credit_args(account, 4_000), target=account)
    assert call.result(timeout=120) == {"account": account, "amount_cents": 4_000}
    assert [a for a in rf.approvals() if a.run_id == run.id] == []


def test_invalid_arguments_are_rejected_at_propose_and_never_reach_an_approver(stack: ToolStack, rf: Runfacts,
                                                                               unique: str) -> None:
    account = f"acct-{int(unique, 16) % 10**8 + 2}"
    run = rf.start_run(goal="ticket:T-33", summary="Credit the outage", user_id="customer-7")
    with pytest.raises(CommandRejected) as refused:
        run.propose("billing.issue_credit", credit_args(account, 250_000), target=account)
    assert refused.value.reason == "invalid_arguments"
    assert "amount_cents" in str(refused.value) and "100000" in str(refused.value)
    assert stack.wait(run.id, "the rejection", "command.rejected", reasonCode="invalid_arguments")
    assert [a for a in rf.approvals() if a.run_id == run.id] == [] and rf.state(run.id).toolCalls == {}


def test_an_agent_that_lies_about_the_amount_is_refused_as_a_fact(stack: ToolStack, unique: str) -> None:
    from display_tools import registry

    run_id, account = f"run-liar-{unique}", f"acct-{int(unique, 16) % 10**8 + 3}"
    manifest = registry.catalog().get("billing.issue_credit")
    lie = render(credit_args(account, 10), manifest.schema_or_none(), manifest.rule_fields())
    stack.open_run(run_id)
    assert stack.harness is not None
    stack.harness.propose(lambda ref, digest: stack.command(
        cmd.ProposeToolCall, run_id, toolCallId=f"{run_id}-credit", capabilityId="billing.issue_credit",
        argsHash=digest, argsRef=ref, target=account, action="issue_credit", risk="high",
        summary="credit 10 cents", display=lie), credit_args(account, 9_000))
    events = stack.wait(run_id, "the refusal", "tool.call.failed", errorClass="args_mismatch")
    types = [e.eventType for e in events]
    assert "approval.required" not in types and "tool.call.authorized" in types  # the rule read the lie (10)
    failed = stack.event(run_id, "tool.call.failed").payload
    assert failed.retryable is False and "amount_cents shown 10, stored 9000" in failed.detail
    assert credits(stack, account) == []


def test_the_cli_lists_shows_and_prints_the_arguments_before_approving(stack: ToolStack, rf: Runfacts, unique: str,
                                                                      tmp_path: Any) -> None:
    from ops_support import TOKENS, write_users
    from typer.testing import CliRunner

    from runfacts.cli import app

    account = f"acct-{int(unique, 16) % 10**8 + 4}"
    run = rf.start_run(goal="ticket:T-33", summary="Credit the outage", user_id="customer-7")
    call = run.propose("billing.issue_credit", credit_args(account, 7_500), target=account)
    approval = pending(rf, run.id)
    users = write_users(tmp_path / "u.toml")
    env = {"RUNFACTS_KAFKA_BOOTSTRAP_SERVERS": stack.options.kafka.bootstrap_servers,
           "RUNFACTS_KAFKA_TOPIC_PREFIX": stack.names.prefix, "RUNFACTS_USERS_FILE": str(users),
           "RUNFACTS_USER": "alice", "RUNFACTS_TOKEN": TOKENS["alice"], "COLUMNS": "200", **stack.options.signing_env}
    cli = CliRunner()
    listed = cli.invoke(app, ["approvals", "list", "--json"], env=env)
    assert listed.exit_code == 0, listed.output
    [mine] = [a for a in json.loads(listed.output) if a["runId"] == run.id]
    assert mine["arguments"] == [f'account = "{account}"', "amount_cents = 7500 cents",
                                 "customer = [personal] (personal)"]
    assert mine["displayDigest"] == approval.display_digest and "Ada" not in listed.output
    shown = cli.invoke(app, ["approvals", "show", approval.approval_id], env=env)
    assert shown.exit_code == 0 and "amount_cents = 7500 cents" in shown.output
    assert approval.display_digest is not None and approval.display_digest in shown.output
    approved = cli.invoke(app, ["approve", approval.approval_id, "--run", run.id], env=env)
    assert approved.exit_code == 0, approved.output
    assert approved.output.index("amount_cents = 7500 cents") < approved.output.index("approval.granted")
    assert call.result(timeout=120) == {"account": account, "amount_cents": 7_500}
