"""The OpenAI Agents SDK bridge on the real broker with real workers (decider, dispatcher, payment
simulator as subprocesses) and the real SDK (its ScriptedModel: no network, no weights; tracing
off): the example's refund agent approved, rejected, expired, with a lost response, killed with
SIGKILL while it waits for the approval; a forged approval refused; a tool failing after its
approval shown to the model, never run again."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from client_support import (
    AgentStack,
    approval_of,
    bridge_fixtures,
    killed_while_waiting_then_resumed,
    load_example,
    refunds_of,
)

from runfacts.client import Runfacts

pytest.importorskip("agents", reason="pip install -e '.[dev]' installs openai-agents")
from agents import Runner  # noqa: E402
from agents.exceptions import UserError  # noqa: E402

from runfacts.integrations import ForgedResume  # noqa: E402
from runfacts.integrations.openai_agents import approval_requests, resume_state  # noqa: E402

pytestmark = pytest.mark.integration
EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "openai_agents_refund.py"
example = load_example(EXAMPLE)


stack, rf = bridge_fixtures("openai-agents")


def first_turn(rf: Runfacts, ticket: str, order: str, amount: int, capability: str = "payments.refund") -> Any:
    """Start the run and the agent: it stops on the refund's interruption."""
    agent = example.build_agent(order, amount, capability)
    run = rf.start_run(goal=f"ticket:{ticket}", summary="Refund", user_id="customer-42", run_id=f"oa-{ticket}")
    result = asyncio.run(Runner.run(agent, f"refund {order} {amount}", context=run, run_config=example.NO_NETWORK))
    return agent, run, result


def resumed(agent: Any, state: Any) -> Any:
    return asyncio.run(Runner.run(agent, state, run_config=example.NO_NETWORK))


def test_example_refunds_once_after_the_approval_and_the_model_gets_the_result(
        stack: AgentStack, rf: Runfacts, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(example, "STATE", tmp_path / "state")
    done = asyncio.Event()

    async def approve_when_asked() -> None:
        approval = await asyncio.to_thread(approval_of, rf, "oa-refund-T-1")
        assert refunds_of(stack, "order-oa-1") == []  # nothing ran before the approval
        await asyncio.to_thread(rf.decide, approval, "approve", approver="alice")
        done.set()

    async def both() -> str:
        answer, _ = await asyncio.gather(example.handle(rf, "T-1", "order-oa-1", 4200), approve_when_asked())
        return answer

    answer = asyncio.run(both())
    [refund] = refunds_of(stack, "order-oa-1")
    assert done.is_set() and answer == f"refunded {refund['refundId']}"
    assert rf.state("oa-refund-T-1").status == "completed"
    assert (tmp_path / "state" / "oa-refund-T-1.json").exists()  # the RunState it kept while it waited


def test_interruption_carries_the_runfacts_approval_and_a_rejection_reaches_the_model(
        stack: AgentStack, rf: Runfacts) -> None:
    agent, run, result = first_turn(rf, "T-2", "order-oa-2", 990)
    [item] = result.interruptions
    approval = approval_of(rf, run.id)
    [request] = approval_requests(run, result.to_state(), example.gates()).values()
    assert (request["approvalId"], request["asks"], request["argsHash"]) == (
        approval.approval_id, approval.asks, approval.args_hash)
    rf.decide(approval, "reject", approver="bob")
    final = resumed(agent, asyncio.run(resume_state(run, result.to_state(), example.gates(), timeout=60)))
    assert final.final_output == "not refunded: runfacts: rejected by bob"
    assert refunds_of(stack, "order-oa-2") == []


def test_expired_approval_is_rejected_with_the_reason(stack: AgentStack, rf: Runfacts) -> None:
    agent, run, result = first_turn(rf, "T-3", "order-oa-3", 500, capability="payments.refund.expiring")
    state = asyncio.run(resume_state(run, result.to_state(), example.gates("payments.refund.expiring"), timeout=60))
    final = resumed(agent, state)  # nobody decided within the 4 s window
    assert "approval expired" in final.final_output and refunds_of(stack, "order-oa-3") == []


def test_forged_approval_is_refused_and_nothing_runs(stack: AgentStack, rf: Runfacts) -> None:
    agent, run, result = first_turn(rf, "T-4", "order-oa-4", 7700)
    state = result.to_state()
    [item] = state.get_interruptions()
    state.approve(item)  # the client says "approved"; runfacts holds no decision
    with pytest.raises(UserError, match="runfacts says pending") as raised:  # the SDK wraps a tool's error
        resumed(agent, state)
    assert isinstance(raised.value.__cause__, ForgedResume)
    assert refunds_of(stack, "order-oa-4") == []


def test_tool_failing_after_approval_reaches_the_model_as_the_tools_output_and_never_runs_again(
        stack: AgentStack, rf: Runfacts) -> None:
    agent, run, result = first_turn(rf, "T-5", "order-oa-5", 2_000_000)  # above the provider's limit
    rf.decide(approval_of(rf, run.id), "approve", approver="alice")
    final = resumed(agent, asyncio.run(resume_state(run, result.to_state(), example.gates(), timeout=60)))
    assert final.final_output.startswith("not refunded: refund failed (refused: refund_declined")  # no raise
    assert "will not run this call again" in final.final_output
    facts = [e.event_type for e in run.journal.entries]
    assert facts.count("tool.call.dispatching") == 1 and facts.count("tool.call.failed") == 1
    assert refunds_of(stack, "order-oa-5") == []


def test_lost_response_is_reconciled_and_the_model_still_gets_the_value(stack: AgentStack, rf: Runfacts) -> None:
    agent, run, result = first_turn(rf, "T-6", "order-oa-6", 1200)
    stack.provider("POST", "/_faults", {"acceptThenDropNext": 1})
    rf.decide(approval_of(rf, run.id), "approve", approver="alice")
    final = resumed(agent, asyncio.run(resume_state(run, result.to_state(), example.gates(), timeout=60)))
    facts = [e.event_type for e in run.journal.entries]
    assert "tool.call.result_unknown" in facts and "tool.call.reconciled" in facts
    assert "tool.call.completed" not in facts  # the value came from reconciliation
    [refund] = refunds_of(stack, "order-oa-6")
    assert final.final_output == f"refunded {refund['refundId']}"


def test_agent_killed_while_waiting_resumes_after_approval_and_refunds_once(
        stack: AgentStack, rf: Runfacts, tmp_path: Path) -> None:
    saved = tmp_path / "state" / "oa-refund-T-7.json"  # the agent saved its RunState and waits
    out = killed_while_waiting_then_resumed(
        stack, rf, EXAMPLE, "oa-refund-T-7", "order-oa-7", ["T-7", "order-oa-7", "3100"], ["--resume"],
        {"REFUND_AGENT_STATE": str(tmp_path / "state")}, lambda _: saved.exists())
    [refund] = refunds_of(stack, "order-oa-7")
    assert f"refunded {refund['refundId']}" in out
