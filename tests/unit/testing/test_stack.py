"""runfacts.testing: the packaged decider and dispatcher serving a registry, no broker; the
agent talks through the same client API as in production; faults on demand."""

from __future__ import annotations

import asyncio
import importlib.util
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from types import ModuleType

import pytest
from testing_support import Shop

from runfacts.client import (
    ApprovalExpired,
    ApprovalRejected,
    CommandRejected,
    OutputForbidden,
    Run,
    ToolCall,
    ToolFailed,
    WaitTimeout,
)
from runfacts.schemas.common import Actor
from runfacts.schemas.errors import ConfigError
from runfacts.testing import CRASH_POINTS, Stuck, TestStack

REPO = Path(__file__).resolve().parents[3]
T0 = datetime(2026, 7, 1, 9, 0, tzinfo=UTC)
ARGS = {"orderId": "order-001", "amountMinor": 4200, "currency": "EUR"}
HAPPY = ["run.created", "run.started", "reasoning.recorded", "tool.call.proposed", "approval.required", "run.paused",
         "approval.granted", "tool.call.authorized", "run.resumed", "tool.call.dispatching", "approval.consumed",
         "budget.debited", "tool.call.completed", "verification.updated", "verification.updated", "run.completed",
         "checkpoint.saved", "checkpoint.archived"]  # verification pending, then settled in the same decision
RECONCILED = ["tool.call.dispatching", "approval.consumed", "budget.debited", "tool.call.result_unknown",
              "tool.call.reconciliation_requested", "tool.call.reconciled", "verification.updated"]


@pytest.fixture
def shop() -> Shop:
    return Shop()


@pytest.fixture
def stack(shop: Shop) -> Iterator[TestStack]:
    with TestStack(shop.registry, start=T0) as running:
        yield running


def propose(rf: object, ticket: str = "T-9001", args: dict[str, object] | None = None) -> tuple[Run, ToolCall]:
    run = rf.start_run(goal=f"ticket:{ticket}", summary="Refund", user_id="customer-42",  # type: ignore[attr-defined]
                       budget={"toolCalls": 3, "steps": 20}, run_id=f"refund-{ticket}")
    run.reason("damaged on arrival, within 30 days", evidence=["order:order-001"])
    return run, run.propose("payments.refund", args or ARGS, target="order-001")


def test_the_guides_story_runs_through_the_client_api_without_a_broker(stack: TestStack, shop: Shop) -> None:
    rf = stack.client()
    run, call = propose(rf)
    assert call.approval_id is not None
    [approval] = rf.approvals(role="support_agent")
    assert approval.asks == "refund on order-001 (high risk)" and approval.expires_at == T0 + timedelta(minutes=15)
    assert approval.display is not None and approval.display_digest is not None  # what the approver sees
    assert {f.name: f.value for f in approval.display.fields}["amountMinor"] == "4200"
    rf.decide(approval, "approve", approver="alice")
    assert call.result(timeout=120).model_dump() == {"refundId": "re-1", "orderId": "order-001", "amountMinor": 4200}
    assert asyncio.run(call.result_async(timeout=5)).refundId == "re-1"
    version = run.complete(outcome="refund:order-001")
    assert run.view(min_version=version)["status"] == "completed"
    assert stack.event_types(run.id) == HAPPY
    assert len(stack.executions("payments.refund")) == 1 and len(shop.ledger) == 1

    second, risky = propose(rf, "T-9002", {"orderId": "order-002", "amountMinor": 99900, "currency": "EUR"})
    [pending] = [a for a in rf.approvals(role="support_agent") if a.run_id == second.id]
    rf.decide(pending, "reject", approver="alice")
    with pytest.raises(ApprovalRejected, match="approval rejected by alice"):
        risky.result(timeout=60)
    second.fail("refund_rejected")
    assert stack.states()[second.id].status == "failed" and len(shop.ledger) == 1


def test_start_run_is_idempotent_and_a_restarted_agent_reattaches_with_open_runs(stack: TestStack) -> None:
    rf = stack.client()
    run, call = propose(rf)
    again = rf.start_run(goal="ticket:T-9001", summary="Refund", user_id="customer-42", run_id=run.id)
    assert again.id == run.id and [r.id for r in rf.open_runs()] == [run.id]
    [approval] = rf.approvals(role="support_agent")
    rf.decide(approval, "approve", approver="alice")
    [reattached] = rf.open_runs()
    [pending] = reattached.calls()
    assert pending.id == call.id and pending.result(timeout=1).refundId == "re-1"


def test_a_lost_response_is_reconciled_through_the_tools_lookup_and_the_tool_runs_once(
        stack: TestStack, shop: Shop) -> None:
    rf = stack.client()
    stack.on_approval(lambda a: rf.decide(a, "approve", approver="alice"))
    stack.lose_response("payments.refund")
    run, call = propose(rf)
    assert call.result(timeout=60).refundId == "re-1"
    types = stack.event_types(run.id)
    assert types[types.index("tool.call.dispatching"):] == RECONCILED
    [request] = stack.executions("payments.refund")
    assert stack.lookups("payments.refund") == [request.external_request_id]  # the tool's own lookup answered
    assert len(shop.ledger) == 1


@pytest.mark.parametrize("point", CRASH_POINTS)
def test_a_dispatcher_crash_at_a_named_point_is_survived_by_a_new_incarnation(
        stack: TestStack, shop: Shop, point: str) -> None:
    rf = stack.client()
    stack.on_approval(lambda a: rf.decide(a, "approve", approver="alice"))
    stack.crash_at(point)
    run, call = propose(rf)
    assert call.result(timeout=60).refundId == "re-1"
    assert stack.restarts == 1
    assert len(stack.executions("payments.refund")) == 1 and len(shop.ledger) == 1  # never called again blindly
    assert "tool.call.reconciled" in stack.event_types(run.id)


def test_an_unknown_crash_point_or_capability_is_refused_naming_the_known_ones(stack: TestStack) -> None:
    with pytest.raises(ConfigError, match="dispatcher.after_call_before_record"):
        stack.crash_at("engine.somewhere")
    with pytest.raises(ConfigError, match="payments.refund"):
        stack.lose_response("payments.refnud")


def test_an_approval_expires_when_the_clock_passes_its_ttl_and_a_late_decision_is_refused(
        stack: TestStack, shop: Shop) -> None:
    rf = stack.client()
    _run, call = propose(rf)
    [approval] = rf.approvals(role="support_agent")
    stack.advance(timedelta(minutes=14))
    assert rf.approvals(role="support_agent") == [approval]
    stack.advance(timedelta(minutes=1, seconds=1))
    assert rf.approvals(role="support_agent") == []
    with pytest.raises(ApprovalExpired):
        call.result(timeout=0)
    with pytest.raises(CommandRejected) as late:
        rf.decide(approval, "approve", approver="alice")
    assert late.value.reason == "approval_expired" and shop.ledger == {}


def test_a_wait_skips_the_clock_to_the_next_timer_only_within_its_timeout(stack: TestStack) -> None:
    rf = stack.client()
    _run, call = propose(rf)
    with pytest.raises(WaitTimeout):
        call.result(timeout=60)  # the expiry is 15 minutes away: the clock moves 60 s, no further
    assert stack.now() == T0 + timedelta(seconds=60)
    with pytest.raises(ApprovalExpired):
        call.result(timeout=3600)  # the expiry falls within: skipped to it
    assert T0 + timedelta(minutes=15) <= stack.now() < T0 + timedelta(minutes=16)


def test_a_wait_that_nothing_can_end_says_so_instead_of_hanging(shop: Shop) -> None:
    with TestStack(shop.registry, start=T0, time_skipping=False) as stack:
        _run, call = propose(stack.client())
        with pytest.raises(Stuck, match="decide the pending approval"):
            call.result()


def load_example(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, REPO / "examples" / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_example_refund_agent_runs_unchanged_against_the_test_stack(stack: TestStack, shop: Shop) -> None:
    agent = load_example("refund_agent")
    rf = stack.client()
    decisions = iter(["approve", "reject"])
    stack.on_approval(lambda a: rf.decide(a, next(decisions), approver="alice"))  # a person, while it waits
    refund = agent.handle(rf, "T-9001", "order-001", 4200)
    assert refund.model_dump() == {"refundId": "re-1", "orderId": "order-001", "amountMinor": 4200}
    assert agent.handle(rf, "T-9002", "order-002", 99900) == "rejected"
    assert {r: s.status for r, s in stack.states().items()} == {"refund-T-9001": "completed",
                                                                 "refund-T-9002": "failed"}
    assert len(shop.ledger) == 1


def test_the_example_agent_resumes_its_open_runs_after_a_restart(stack: TestStack, shop: Shop) -> None:
    agent = load_example("refund_agent")
    rf = stack.client()
    run = rf.start_run(goal="ticket:T-9003", summary="Refund order-003", user_id="customer-42", run_id="refund-T-9003")
    run.propose("payments.refund", {"orderId": "order-003", "amountMinor": 100, "currency": "EUR"}, target="order-003")
    # the agent died here; a person approves meanwhile; the restarted agent finishes what is open
    [approval] = rf.approvals(role="support_agent")
    rf.decide(approval, "approve", approver="alice")
    resumed = [agent.finish(open_run, call) for open_run in rf.open_runs() for call in open_run.calls()]
    assert [r.orderId for r in resumed] == ["order-003"]
    assert stack.states()["refund-T-9003"].status == "completed" and len(shop.ledger) == 1



def test_the_example_billing_tools_async_and_failing_ones_included_run_on_the_stack(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("BILLING_LEDGER", str(tmp_path / "billing.db"))
    tools = load_example("billing_tools")
    with TestStack(tools.registry, start=T0) as stack:
        rf = stack.client()
        stack.on_approval(lambda a: rf.decide(a, "approve", approver="alice"))
        run = rf.start_run(goal="ticket:B-1", summary="credit", user_id="u-1", run_id="billing-B-1")
        stack.lose_response("billing.credit")  # reconciled through find_credit, the example's lookup
        credit = run.propose("billing.credit", {"account": "acct-7", "amount_minor": 500}, target="acct-7")
        assert credit.result(timeout=600).amount_minor == 500
        balance = run.propose("billing.balance", {"account": "acct-7"}, target="acct-7")  # an async tool
        assert balance.result(timeout=60).model_dump() == {"account": "acct-7", "balance_minor": 500}
        closed = run.propose("billing.credit", {"account": "acct-0", "amount_minor": 5}, target="acct-0")
        with pytest.raises(ToolFailed, match="account_closed"):
            closed.result(timeout=600)
        assert len(stack.lookups("billing.credit")) == 1 and len(stack.executions("billing.credit")) == 2


def test_a_memory_is_proposed_reviewed_served_and_expires_with_the_clock(stack: TestStack) -> None:
    rf = stack.client()
    learned = rf.start_run(goal="ticket:T-9004", summary="Refund order-004", user_id="customer-42", tenant="acme",
                           run_id="refund-T-9004")
    learned.reason("order-004 arrived damaged: refund without a return", evidence=["order:order-004"])
    learned.complete(outcome="ticket:T-9004")
    lesson = learned.propose_memory("lessons/damaged-no-return", evidence=learned.evidence(),
                                    scope=("acme", "capability:payments.refund"), expires=T0 + timedelta(days=30))
    rf.review_memory(learned.id, lesson, "approve", reviewer="rita")
    scope = ("acme", "capability:payments.refund")
    assert [(e.statementRef, e.reviewer) for e in rf.memory(scope)] == [("lessons/damaged-no-return", "rita")]
    stack.advance(timedelta(days=31))
    assert rf.memory(scope) == [] and stack.event_types(learned.id)[-1] == "memory.expired"


USER_METHODS = ("start_run", "run", "open_runs", "state", "approvals", "decide", "memory", "review_memory",
                "revoke_memory", "close")


def test_the_test_client_offers_every_method_of_runfacts_with_the_same_parameters() -> None:
    import inspect

    from runfacts.client import Runfacts
    from runfacts.testing import TestClient

    public = {name for name, _ in inspect.getmembers(Runfacts, callable) if not name.startswith("_")} - {"connect"}
    assert sorted(public - set(dir(TestClient))) == [], "an agent calling these would fail on the test stack"
    for name in USER_METHODS:
        ours = list(inspect.signature(getattr(TestClient, name)).parameters)
        theirs = list(inspect.signature(getattr(Runfacts, name)).parameters)
        assert ours == theirs, f"TestClient.{name}{ours} differs from Runfacts.{name}{theirs}"


def test_child_run_returns_its_unspent_budget_to_the_parent_when_it_completes_on_the_test_stack(
        stack: TestStack) -> None:
    rf = stack.client()
    parent = rf.start_run(goal="ticket:T-1", summary="evidence", user_id="customer-1", budget={"steps": 10})
    child = parent.start_child(goal="ticket:T-1:a", summary="worker", budget={"steps": 4}, run_id="run-worker-a")

    assert rf.state(child.id).parentRunId == parent.id and rf.state(parent.id).budget.reserved.steps == 4
    with pytest.raises(CommandRejected) as over:
        parent.start_child(goal="ticket:T-1:b", summary="worker", budget={"steps": 7})
    assert over.value.reason == "budget_exceeded"
    child.debit("step", steps=1)
    child.append_evidence("ev-1", "sha256:" + "1" * 64, "ref/ev-1")
    child.complete()
    report = parent.child_report(child)

    assert (report.status, report.used.steps, report.released.steps) == ("completed", 1, 3)
    assert rf.state(parent.id).evidenceItems["ev-1"].by == child.id


def test_a_runs_output_on_the_test_stack_is_read_once_each_after_a_retry_from_the_start(stack: TestStack) -> None:
    rf = stack.client()
    run = rf.start_run(goal="ticket:T-1", summary="Refund", user_id="customer-42")
    first = rf.output(run.id)  # dies after two chunks: no close
    first.write("a")
    first.write("b")
    retry = rf.output(run.id)  # from seq 0 again; dies after three
    for text in ("a", "b", "c"):
        retry.write(text)
    with rf.output(run.id, resume=True) as more:  # continues after the last seq written
        more.write("d")

    chunks = rf.read_output(run.id)
    assert [(c.seq, c.text, c.done) for c in chunks] == [(0, "a", False), (1, "b", False), (2, "c", False),
                                                          (3, "d", False), (4, "", True)]
    assert more.written == 2 and len(rf._output_chunks(run.id)) == 2 + 3 + 2  # what was written, twice or not
    browser = Actor(subjectId="alice", roles=("support_agent",), authSource="dashboard")
    with pytest.raises(OutputForbidden):
        rf.output(run.id, actor=browser)
