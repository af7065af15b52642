"""Compensation on the real broker (issue 35): a run with two completed effects is cancelled; the
real decider proposes their compensations newest first, the real dispatcher runs each (its
arguments derived from the original call's arguments and result), and the run ends compensated
with exactly one undo per effect in the ledger."""

from __future__ import annotations

import sqlite3
import uuid
from collections.abc import Iterator

import pytest
from tools_support import REPO, ToolStack

from runfacts.client import Runfacts
from runfacts.demo.stack import DemoOptions
from runfacts.schemas import commands as cmd
from runfacts.schemas.common import Actor
from runfacts.settings import KafkaSettings

pytestmark = pytest.mark.integration
TOOLS = f"{REPO}/tests/integration/compensation_tools.py:registry"
CUSTOMER = Actor(subjectId="customer-7", roles=("user",), authSource="dashboard")


@pytest.fixture(scope="module")
def stack(kafka_bootstrap: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ToolStack]:
    options = DemoOptions(prefix=f"cp-{uuid.uuid4().hex[:10]}", workdir=tmp_path_factory.mktemp("comp"),
                          partitions=2, kafka=KafkaSettings(bootstrap_servers=kafka_bootstrap))
    stack = ToolStack(options, tools=TOOLS)
    try:
        stack.start()
        yield stack
    finally:
        stack.stop()


def ledger(stack: ToolStack) -> list[tuple[str, str, int]]:
    with sqlite3.connect(stack.dir / "ledger.db") as db:
        return [(k, r, a) for k, r, a in db.execute("SELECT kind, ref, amount FROM shop ORDER BY at")]


def test_cancel_compensates_two_completed_effects_in_reverse_order(stack: ToolStack) -> None:
    from compensation_tools import registry

    rf = Runfacts.connect(kafka=stack.options.kafka, prefix=stack.names.prefix, args_store=stack.dir / "harness.db",
                          capabilities=registry)
    try:
        run = rf.start_run(goal="ticket:T-35", summary="Sell one lamp", user_id="customer-7")
        reserve = run.propose("shop.reserve", {"sku": "lamp", "qty": 1}, target="lamp")
        assert reserve.result(timeout=120) == {"reservation_id": f"res-{reserve.id}"}
        charge = run.propose("shop.charge", {"order_id": "o-35", "amount_minor": 4200}, target="o-35")
        assert charge.result(timeout=120) == {"charge_id": f"ch-{charge.id}"}
        assert stack.harness is not None
        stack.harness.send(stack.command(cmd.CancelRun, run.id, CUSTOMER, reason="customer changed their mind"))
        events = stack.wait(run.id, "the compensated run", "run.compensated", timeout=120)
    finally:
        rf.close()
    started = [e.payload.toolCallId for e in events if e.eventType == "compensation.started"]
    assert started == [charge.id, reserve.id]  # newest first
    ended = events[-1] if events[-1].eventType == "run.compensated" else stack.event(run.id, "run.compensated")
    assert list(ended.payload.compensatedToolCalls) == [charge.id, reserve.id]
    assert ledger(stack) == [("reserve", "lamp", 1), ("charge", "o-35", 4200),
                             ("refund", f"ch-{charge.id}", 4200), ("release", f"res-{reserve.id}", 1)]
    assert stack.log is not None
    types = [e.eventType for e in stack.log.of(run.id)]
    assert types.count("tool.call.completed") == 4 and "run.cancelled" not in types


def _cli(stack: ToolStack, user: str, *args: str):  # noqa: ANN202
    import os
    import subprocess
    import sys

    from ops_support import TOKENS, write_users
    users = write_users(stack.dir / "users.toml")
    env = {**os.environ, "RUNFACTS_KAFKA_BOOTSTRAP_SERVERS": stack.options.kafka.bootstrap_servers,
           "RUNFACTS_KAFKA_TOPIC_PREFIX": stack.names.prefix, "RUNFACTS_USERS_FILE": str(users),
           "RUNFACTS_USER": user, "RUNFACTS_TOKEN": TOKENS[user], "COLUMNS": "200"}
    return subprocess.run([sys.executable, "-m", "runfacts.cli", *args], env=env, cwd=REPO, capture_output=True,
                          text=True, timeout=120)


def test_declined_undo_waits_for_an_operator_who_retries_it_and_the_run_ends_compensated(stack: ToolStack) -> None:
    """The refund undoing a charge is declined: the run waits in needs_review. A customer (through the
    harness) and a support agent (through the CLI) are refused; the operator's retry runs the refund
    once, then the release, and the run ends compensated."""
    from compensation_tools import registry

    down = stack.dir / "ledger.db.refunds-down"
    rf = Runfacts.connect(kafka=stack.options.kafka, prefix=stack.names.prefix, args_store=stack.dir / "harness.db",
                          capabilities=registry)
    try:
        run = rf.start_run(goal="ticket:T-35b", summary="Sell one desk", user_id="customer-7")
        reserve = run.propose("shop.reserve", {"sku": "desk", "qty": 1}, target="desk")
        reserve.result(timeout=120)
        charge = run.propose("shop.charge", {"order_id": "o-36", "amount_minor": 9900}, target="o-36")
        charge.result(timeout=120)
    finally:
        rf.close()
    down.touch()
    assert stack.harness is not None
    stack.harness.send(stack.command(cmd.CancelRun, run.id, CUSTOMER, reason="customer changed their mind"))
    stack.wait(run.id, "the review after the declined refund", "run.needs_review", timeout=120)
    down.unlink()

    stack.harness.send(stack.command(cmd.ResolveCompensation, run.id, CUSTOMER, toolCallId=charge.id,
                                     decision="retry"))
    stack.wait(run.id, "the customer's refusal", "command.rejected", timeout=60)
    refused = stack.event(run.id, "command.rejected").payload
    assert (refused.commandType, refused.reasonCode) == ("compensation.resolve", "forbidden_role")
    assert "compensation.resolve needs the role operator" in refused.detail
    by_support = _cli(stack, "alice", "runs", "resolve-compensation", run.id, "--decision", "retry")
    assert by_support.returncode == 3 and "forbidden_role" in by_support.stdout, by_support.stdout + by_support.stderr
    retried = _cli(stack, "olga", "runs", "resolve-compensation", run.id, "--decision", "retry",
                   "--note", "PSP back up")
    assert retried.returncode == 0 and "compensation.resolved" in retried.stdout, retried.stdout + retried.stderr
    stack.wait(run.id, "the compensated run", "run.compensated", timeout=120)
    assert [(k, r) for k, r, _ in ledger(stack) if r in (f"ch-{charge.id}", f"res-{reserve.id}")] == [
        ("refund", f"ch-{charge.id}"), ("release", f"res-{reserve.id}")]  # each undo exactly once
    assert stack.log is not None
    resolved = [e for e in stack.log.of(run.id) if e.eventType == "compensation.resolved"]
    assert [(e.payload.decision, e.payload.actor.subjectId) for e in resolved] == [("retry", "olga")]
