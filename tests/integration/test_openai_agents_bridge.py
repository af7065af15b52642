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


def test_a_call_with_missing_arguments_is_a_validation_error_and_never_reaches_an_approver(
        stack: AgentStack, rf: Runfacts) -> None:
    from agents import Agent
    from agents.testing import ModelStep, ScriptedModel, assistant_message, function_call

    def report(call: Any) -> list[Any]:
        [output] = [str(i["output"]) for i in call.input
                    if isinstance(i, dict) and i.get("type") == "function_call_output"]
        return [assistant_message(f"tool said: {output}")]

    model = ScriptedModel([ModelStep.respond(lambda _: [function_call("refund", {"orderId": "order-oa-8"},
                                                                      call_id="fc-oa-8")]),
                           ModelStep.respond(report)])
    agent = Agent(name="refunds", model=model, tools=example.gated_tools([example.refund], example.gates()))
    run = rf.start_run(goal="ticket:T-8", summary="Refund", user_id="customer-42", run_id="oa-T-8")
    result = asyncio.run(Runner.run(agent, "refund order-oa-8", context=run, run_config=example.NO_NETWORK))
    assert result.interruptions == []  # nobody is asked
    assert result.final_output.startswith("tool said: Invalid JSON input for tool refund")  # the SDK's own form
    assert "amountMinor" in result.final_output and "ran once" not in result.final_output
    facts = [e.event_type for e in run.journal.entries]
    assert "tool.call.proposed" not in facts and "approval.required" not in facts
    assert [a for a in rf.approvals(role="support_agent") if a.run_id == run.id] == []


def test_a_rejection_in_the_state_for_a_call_runfacts_executed_gives_the_model_the_real_result(
        stack: AgentStack, rf: Runfacts) -> None:
    from runfacts.client import ToolCall

    agent, run, result = first_turn(rf, "T-9", "order-oa-9", 1900)
    [request] = approval_requests(run, result.to_state(), example.gates()).values()
    rf.decide(approval_of(rf, run.id), "approve", approver="alice")  # approved in runfacts' console
    value = ToolCall(run, request["toolCallId"], "payments.refund", "", None).result(timeout=60)  # it ran
    state = result.to_state()
    [item] = state.get_interruptions()
    state.reject(item, rejection_message="the app's own reviewer clicked reject")  # the app's UI says no
    final = resumed(agent, state)
    assert final.final_output == f"refunded {value['refundId']}"  # never "denied" for a call that executed
    assert len(refunds_of(stack, "order-oa-9")) == 1


def test_a_rejection_in_the_state_for_a_call_runfacts_still_waits_on_is_refused(
        stack: AgentStack, rf: Runfacts) -> None:
    agent, run, result = first_turn(rf, "T-10", "order-oa-10", 2100)
    state = result.to_state()
    [item] = state.get_interruptions()
    state.reject(item)  # a person may still approve it in runfacts, and then it runs
    with pytest.raises(ForgedResume, match="the resume says a tool result but runfacts says pending"):
        resumed(agent, state)
    assert refunds_of(stack, "order-oa-10") == []
