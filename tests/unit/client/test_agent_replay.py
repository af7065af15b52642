"""An agent's handler re-entered on a run's facts (runfacts.client.agents.Replay), on the
broker-free test stack: recorded steps return their recorded answers (nothing is sent again: no
rejected command, no second reasoning), the first step not recorded is sent, and a handler that
asks a different step than the facts record is refused with ReplayDiverged naming the step."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from testing_support import Shop

from runfacts.client import ReplayDiverged, Revoked, Run
from runfacts.client.agents import Replay
from runfacts.schemas.common import Actor
from runfacts.testing import TestStack

AGENT = Actor(subjectId="refunds", roles=("agent",), authSource="agent-harness")


def handler(run: Run, stop_after_refund: bool, amount: int = 4200) -> None:
    run.reason("damaged on arrival", evidence=["order:order-001"])
    call = run.propose("payments.refund", {"orderId": "order-001", "amountMinor": amount, "currency": "EUR"},
                       target="order-001")
    refund = call.result(timeout=600)
    run.progress("tell the customer", verified=[f"refund:{refund.refundId}"])
    if stop_after_refund:
        raise SystemExit("killed")  # the process dies here
    run.complete(outcome=f"refund:{refund.refundId}")


def attempt(stack: TestStack, stop: bool, amount: int = 4200) -> None:
    run = stack.client().run("agent-T-1")
    run.replay = Replay(AGENT)
    handler(run, stop, amount)


@pytest.fixture
def stack() -> TestStack:
    shop = Shop()
    running = TestStack(shop.registry, start=datetime(2026, 1, 1, tzinfo=UTC))
    rf = running.client()
    running.on_approval(lambda a: rf.decide(a, "approve", approver="alice"))
    rf.start_run(goal="ticket:T-1", summary="Refund", user_id="customer-42", run_id="agent-T-1", actor=AGENT)
    return running


def test_a_re_entered_handler_sends_only_the_steps_its_facts_do_not_record(stack: TestStack) -> None:
    with pytest.raises(SystemExit):
        attempt(stack, stop=True)
    before = stack.event_types("agent-T-1")
    attempt(stack, stop=False)  # re-entered: reason, propose, result, progress answer from the facts
    after = stack.event_types("agent-T-1")
    assert after[:len(before)] == before and "run.completed" in after[len(before):]
    assert "command.rejected" not in after and after.count("reasoning.recorded") == 1
    assert after.count("progress.updated") == 1 and len(stack.executions("payments.refund")) == 1
    attempt(stack, stop=False)  # once more: every step recorded, nothing sent
    assert stack.event_types("agent-T-1") == after


def test_a_handler_that_asks_another_step_than_recorded_is_refused_naming_it(stack: TestStack) -> None:
    with pytest.raises(SystemExit):
        attempt(stack, stop=True)
    with pytest.raises(ReplayDiverged, match=r"step 1: the run's facts record tool.call.proposed") as diverged:
        attempt(stack, stop=False, amount=999)  # not deterministic: another amount this time
    assert diverged.value.step == 1 and "ProposeToolCall" in diverged.value.asked
    assert len(stack.executions("payments.refund")) == 1


def test_a_run_that_moved_to_another_process_stops_at_its_next_step(stack: TestStack) -> None:
    run = stack.client().run("agent-T-1")
    run.replay = Replay(AGENT)
    run.replay.revoked.set()
    with pytest.raises(Revoked):
        run.reason("damaged on arrival", evidence=["order:order-001"])
    assert "reasoning.recorded" not in stack.event_types("agent-T-1")


def test_an_agent_on_the_test_stack_recovers_its_open_runs_after_a_crash() -> None:
    shop = Shop()
    with TestStack(shop.registry, start=datetime(2026, 1, 1, tzinfo=UTC)) as stack:
        rf = stack.client()
        stack.on_approval(lambda a: rf.decide(a, "approve", approver="alice"))
        crashes = iter([True])

        @rf.agent("refunds")
        def refunds(run: Run) -> None:
            handler(run, stop_after_refund=next(crashes, False))

        run = refunds.submit(goal="ticket:T-2", summary="Refund", user_id="customer-42", run_id="agent-T-2")
        with pytest.raises(SystemExit):  # the first process dies after the refund
            refunds.recover()
        assert refunds.recover() == [run.id]  # the next one re-enters it
        assert stack.states()[run.id].status == "completed" and refunds.open_runs() == []
        assert len(stack.executions("payments.refund")) == 1
        assert "command.rejected" not in stack.event_types(run.id)
