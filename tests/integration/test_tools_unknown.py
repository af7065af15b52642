"""Unknown unless proven (SEMANTICS.md §14) on the real broker with the real decider and
dispatcher: a tool that wrote its ledger row and then lost the connection is result_unknown,
reconciled by its lookup (one ledger row); without a lookup the run goes to a person at once
and `runfacts runs list --needs-review` lists it; a read-only tool without a lookup whose
dispatcher died after it answered is simply run again and its run completes."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
import uuid
from collections.abc import Iterator

import pytest
from tools_support import REPO, ToolStack

from runfacts.demo.stack import DISPATCH_CRASH_POINT, DemoOptions
from runfacts.schemas import commands as cmd
from runfacts.settings import KafkaSettings

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def stack(kafka_bootstrap: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ToolStack]:
    workdir = tmp_path_factory.mktemp("unknown")
    options = DemoOptions(prefix=f"un-{uuid.uuid4().hex[:10]}", workdir=workdir, partitions=2,
                          kafka=KafkaSettings(bootstrap_servers=kafka_bootstrap))
    tools = f"{REPO / 'tests' / 'integration' / 'unknown_tools.py'}:registry"
    stack = ToolStack(options, tools=tools, UNKNOWN_LEDGER=str(workdir / "ledger.db"))
    try:
        stack.start()
        yield stack
    finally:
        stack.stop()


def _rows(stack: ToolStack, sql: str, *params: str) -> list[tuple]:
    with sqlite3.connect(stack.dir / "ledger.db") as db:
        return db.execute(sql, params).fetchall()


def _types(stack: ToolStack, run: str) -> list[str]:
    assert stack.log is not None
    return [e.eventType for e in stack.log.of(run)]


def _needs_review(stack: ToolStack) -> list[dict]:
    env = {**os.environ, "RUNFACTS_KAFKA_BOOTSTRAP_SERVERS": stack.options.kafka.bootstrap_servers,
           "RUNFACTS_KAFKA_TOPIC_PREFIX": stack.names.prefix}
    done = subprocess.run([sys.executable, "-m", "runfacts.cli", "runs", "list", "--needs-review", "--json"],
                          env=env, cwd=REPO, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_reset_after_the_write_is_reconciled_by_the_lookup_when_the_tool_has_one(stack: ToolStack) -> None:
    run = f"run-reset-{uuid.uuid4().hex[:6]}"
    stack.open_run(run)
    stack.propose(run, f"{run}-charge", "ledger.charge", {"account": "acct-11", "amount_minor": 900}, risk="low")
    stack.wait(run, "the reconciliation", "tool.call.reconciled", outcome="found_completed")
    unknown = stack.event(run, "tool.call.result_unknown").payload
    assert "ConnectionResetError" in unknown.lastError
    types = _types(stack, run)
    assert "tool.call.failed" not in types and "tool.call.completed" not in types
    assert types.count("tool.call.dispatching") == 1
    value = json.loads(stack.event(run, "tool.call.reconciled").payload.result)
    assert value == {"charge_id": f"ch-{run}-charge", "account": "acct-11", "amount_minor": 900}
    assert _rows(stack, "SELECT account, amount_minor FROM charges WHERE account = ?", "acct-11") == [("acct-11", 900)]


def test_reset_after_the_write_needs_review_when_the_tool_has_no_lookup(stack: ToolStack) -> None:
    run = f"run-blind-{uuid.uuid4().hex[:6]}"
    stack.open_run(run)
    stack.propose(run, f"{run}-charge", "ledger.charge_blind", {"account": "acct-12", "amount_minor": 400},
                  risk="low")
    stack.wait(run, "a person asked", "run.needs_review", timeout=60)  # at once, not at the 10-minute deadline
    review = stack.event(run, "run.needs_review").payload
    assert review.reason == "unresolved_side_effect" and "no lookup" in review.detail
    types = _types(stack, run)
    assert "tool.call.result_unknown" in types and "tool.call.failed" not in types
    assert _rows(stack, "SELECT account, amount_minor FROM charges WHERE account = ?", "acct-12") == [("acct-12", 400)]
    listed = {row["runId"]: row for row in _needs_review(stack)}
    assert run in listed and listed[run]["statusReason"] == "unresolved_side_effect"


def test_read_only_tool_without_lookup_runs_again_when_its_dispatcher_died_after_the_call(
        stack: ToolStack) -> None:
    stack._terminate("dispatcher")
    stack.start_dispatcher(crash_at=DISPATCH_CRASH_POINT)  # dies after the tool answered, before any report
    run = f"run-read-{uuid.uuid4().hex[:6]}"
    stack.open_run(run)
    stack.propose(run, f"{run}-balance", "ledger.balance", {"account": "acct-13"}, risk="low")
    assert stack.wait_exit("dispatcher", 60) is not None, "the dispatcher did not reach its crash point"
    stack.forget("dispatcher")
    assert len(_rows(stack, "SELECT * FROM reads WHERE account = ?", "acct-13")) == 1  # it did run
    stack.start_dispatcher()
    stack.wait(run, "the balance", "tool.call.completed", timeout=60)
    types = _types(stack, run)
    assert "tool.call.result_unknown" not in types and "run.needs_review" not in types
    assert types.count("tool.call.dispatching") == 1
    assert json.loads(stack.event(run, "tool.call.completed").payload.result) == {
        "account": "acct-13", "charged_minor": 0}
    assert len(_rows(stack, "SELECT * FROM reads WHERE account = ?", "acct-13")) == 2  # run again, once
    assert stack.harness is not None
    stack.harness.send(stack.command(cmd.CompleteRun, run, outcomeRef=f"outcome:{run}"))
    stack.wait(run, "the run's end", "run.completed", timeout=60)
    assert run not in {row["runId"] for row in _needs_review(stack)}


def test_read_only_tool_is_retried_not_reconciled_when_it_loses_its_connection(stack: ToolStack) -> None:
    run = f"run-flaky-{uuid.uuid4().hex[:6]}"
    account = f"flaky-{run}"
    stack.open_run(run)
    stack.propose(run, f"{run}-balance", "ledger.balance", {"account": account}, risk="low")
    stack.wait(run, "the balance", "tool.call.completed", timeout=60)
    types = _types(stack, run)
    assert "tool.call.result_unknown" not in types and "tool.call.failed" not in types
    assert types.count("tool.call.dispatching") == 1  # retried inside the claim, same key
    assert len(_rows(stack, "SELECT * FROM reads WHERE account = ?", account)) == 2
