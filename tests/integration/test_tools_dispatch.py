"""Custom tools end to end on the real broker: the registry's exported manifest read by the
real decider, the tools served by the real dispatcher (`--tools examples.billing_tools:registry`),
the result value on the completion facts; a lost response reconciled with the value; one credit."""

from __future__ import annotations

import json
import sqlite3
import uuid
from collections.abc import Iterator

import pytest
from tools_support import ToolStack

from runfacts.demo.stack import DISPATCH_CRASH_POINT, DemoOptions
from runfacts.settings import KafkaSettings

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def stack(kafka_bootstrap: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ToolStack]:
    options = DemoOptions(prefix=f"tl-{uuid.uuid4().hex[:10]}", workdir=tmp_path_factory.mktemp("tools"),
                          partitions=2, kafka=KafkaSettings(bootstrap_servers=kafka_bootstrap))
    stack = ToolStack(options)
    try:
        stack.start()
        yield stack
    finally:
        stack.stop()


def _credits(stack: ToolStack) -> list[tuple[str, str, int]]:
    with sqlite3.connect(stack.dir / "ledger.db") as db:
        return db.execute("SELECT idempotency_key, account, amount_minor FROM credits ORDER BY account").fetchall()


def _approved_credit(stack: ToolStack, run: str, account: str, amount: int) -> None:
    stack.open_run(run)
    digest = stack.propose(run, f"{run}-credit", "billing.credit", {"account": account, "amount_minor": amount})
    stack.wait(run, "the approval request", "approval.required")
    stack.approve(run, stack.event(run, "approval.required").payload.approvalId, digest)


def test_sync_tool_completes_with_its_value_on_the_log_when_approved(stack: ToolStack) -> None:
    run = f"run-sync-{uuid.uuid4().hex[:6]}"
    _approved_credit(stack, run, "acct-1", 1250)
    stack.wait(run, "the credit", "tool.call.completed")
    value = json.loads(stack.event(run, "tool.call.completed").payload.result)
    assert value == {"account": "acct-1", "amount_minor": 1250, "credit_id": f"cr-{run}-credit"}
    assert [c[1:] for c in _credits(stack) if c[1] == "acct-1"] == [("acct-1", 1250)]


def test_async_tool_completes_without_approval_when_its_policy_allows(stack: ToolStack) -> None:
    run = f"run-async-{uuid.uuid4().hex[:6]}"
    stack.open_run(run)
    stack.propose(run, f"{run}-balance", "billing.balance", {"account": "acct-1"}, risk="low")
    events = stack.wait(run, "the balance", "tool.call.completed")
    assert "approval.required" not in [e.eventType for e in events]
    value = json.loads(stack.event(run, "tool.call.completed").payload.result)
    assert value == {"account": "acct-1", "balance_minor": 1250}


def test_args_that_fail_the_model_fail_the_call_naming_the_field(stack: ToolStack) -> None:
    run = f"run-bad-{uuid.uuid4().hex[:6]}"
    _approved_credit(stack, run, "acct-2", -5)
    stack.wait(run, "the refusal", "tool.call.failed")
    failed = stack.event(run, "tool.call.failed").payload
    assert (failed.errorClass, failed.retryable) == ("validation", False)
    assert "tool billing.credit" in failed.detail and "amount_minor" in failed.detail
    assert not [c for c in _credits(stack) if c[1] == "acct-2"]


def test_lost_response_is_reconciled_with_the_value_and_credits_once(stack: ToolStack) -> None:
    stack._terminate("dispatcher")
    stack.start_dispatcher(crash_at=DISPATCH_CRASH_POINT)  # dies after the tool ran, before any report
    run = f"run-lost-{uuid.uuid4().hex[:6]}"
    _approved_credit(stack, run, "acct-3", 700)
    assert stack.wait_exit("dispatcher", 60) is not None, "the dispatcher did not reach its crash point"
    stack.forget("dispatcher")
    assert [c[1:] for c in _credits(stack) if c[1] == "acct-3"] == [("acct-3", 700)]  # it did act
    stack.start_dispatcher()
    stack.wait(run, "the reconciliation", "tool.call.reconciled", outcome="found_completed")
    types = [e.eventType for e in stack.log.of(run)] if stack.log else []
    assert "tool.call.result_unknown" in types and "tool.call.completed" not in types
    [found] = [e for e in stack.log.of(run) if e.eventType == "tool.call.reconciled"  # a still_unknown may come first
               and e.payload.outcome == "found_completed"]
    value = json.loads(found.payload.result)
    assert value == {"account": "acct-3", "amount_minor": 700, "credit_id": f"cr-{run}-credit"}
    stack.wait(run, "verification", "verification.updated", status="confirmed_success")
    assert [c[1:] for c in _credits(stack) if c[1] == "acct-3"] == [("acct-3", 700)]
