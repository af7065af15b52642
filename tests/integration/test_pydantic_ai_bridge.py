"""The Pydantic AI bridge on the real broker with real workers (decider, dispatcher, payment
simulator as subprocesses) and real pydantic-ai (FunctionModel: no network, no weights): the
example's refund agent approved, rejected, expired, with a lost response, killed with SIGKILL
while it waits for the approval; a forged resume refused; a tool failing after its approval
shown to the model, never run again."""

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

pytest.importorskip("pydantic_ai", reason="pip install -e '.[dev]' installs pydantic-ai-slim")
from pydantic_ai import Agent, ApprovalRequired, CallDeferred  # noqa: E402
from pydantic_ai.messages import ModelResponse, TextPart, ToolCallPart, ToolReturnPart  # noqa: E402
from pydantic_ai.models.function import FunctionModel  # noqa: E402
from pydantic_ai.tools import DeferredToolRequests, DeferredToolResults, ToolDenied  # noqa: E402
from pydantic_ai.toolsets import FunctionToolset  # noqa: E402

from runfacts.integrations import ForgedResume  # noqa: E402
from runfacts.integrations.pydantic_ai import META_KEY, Gate, RunfactsApprovals, resume_results  # noqa: E402

pytestmark = pytest.mark.integration
REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "examples" / "pydantic_ai_refund.py"




example = load_example(EXAMPLE)


stack, rf = bridge_fixtures("pydantic-ai")






def first_turn(rf: Runfacts, ticket: str, order: str, amount: int, capability: str = "payments.refund") -> Any:
    """Start the run and the agent: it ends with DeferredToolRequests (the refund waits)."""
    agent = example.build_agent(capability)
    run = rf.start_run(goal=f"ticket:{ticket}", summary="Refund", user_id="customer-42", run_id=f"pa-{ticket}")
    result = asyncio.run(agent.run(f"refund {order} {amount}", deps=run))
    return agent, run, result


def tool_returns(messages: list[Any]) -> list[Any]:
    return [p.content for m in messages for p in m.parts if isinstance(p, ToolReturnPart)]


def test_approved_refund_reaches_the_model_as_the_dispatchers_result(stack: AgentStack, rf: Runfacts) -> None:
    agent, run, result = first_turn(rf, "T-1", "order-pa-1", 4200)
    requests = result.output
    assert isinstance(requests, DeferredToolRequests) and len(requests.approvals) == 1
    meta = requests.metadata[requests.approvals[0].tool_call_id][META_KEY]
    approval = approval_of(rf, run.id)
    assert meta["approvalId"] == approval.approval_id and meta["asks"] == approval.asks
    assert meta["argsHash"] == approval.args_hash and meta["expiresAt"] == approval.expires_at.isoformat()
    assert refunds_of(stack, "order-pa-1") == []  # nothing ran before the approval
    rf.decide(approval, "approve", approver="alice")
    results = asyncio.run(resume_results(run, requests, timeout=60))
    final = asyncio.run(agent.run(message_history=result.all_messages(), deferred_tool_results=results, deps=run))
    [refund] = refunds_of(stack, "order-pa-1")
    assert final.output == f"refunded {refund['refundId']}"
    assert tool_returns(final.all_messages())[-1]["refundId"] == refund["refundId"]
    again = run.propose("payments.refund", {"orderId": "order-pa-1", "amountMinor": 4200, "currency": "EUR"},
                        target="order-pa-1")
    assert again.id == meta["toolCallId"]  # the bridge's call id is Run.propose's default: one call, not two
    assert len(refunds_of(stack, "order-pa-1")) == 1


def test_rejected_refund_is_denied_with_runfacts_reason_and_never_runs(stack: AgentStack, rf: Runfacts) -> None:
    agent, run, result = first_turn(rf, "T-2", "order-pa-2", 990)
    rf.decide(approval_of(rf, run.id), "reject", approver="bob")
    results = asyncio.run(resume_results(run, result.output, timeout=60))
    [denied] = results.approvals.values()
    assert "rejected by bob" in denied.message  # type: ignore[union-attr]
    final = asyncio.run(agent.run(message_history=result.all_messages(), deferred_tool_results=results, deps=run))
    assert final.output.startswith("not refunded: runfacts: rejected by bob")
    assert refunds_of(stack, "order-pa-2") == []


def test_expired_approval_is_denied_with_the_reason(stack: AgentStack, rf: Runfacts) -> None:
    agent, run, result = first_turn(rf, "T-3", "order-pa-3", 500, capability="payments.refund.expiring")
    results = asyncio.run(resume_results(run, result.output, timeout=60))  # nobody decides: the TTL is 4 s
    [denied] = results.approvals.values()
    assert "expired" in denied.message  # type: ignore[union-attr]
    final = asyncio.run(agent.run(message_history=result.all_messages(), deferred_tool_results=results, deps=run))
    assert "approval expired" in final.output and refunds_of(stack, "order-pa-3") == []


def test_lost_response_is_reconciled_and_the_model_still_gets_the_value(stack: AgentStack, rf: Runfacts) -> None:
    agent, run, result = first_turn(rf, "T-4", "order-pa-4", 1200)
    stack.provider("POST", "/_faults", {"acceptThenDropNext": 1})
    rf.decide(approval_of(rf, run.id), "approve", approver="alice")
    results = asyncio.run(resume_results(run, result.output, timeout=60))
    final = asyncio.run(agent.run(message_history=result.all_messages(), deferred_tool_results=results, deps=run))
    facts = [e.event_type for e in run.journal.entries]
    assert "tool.call.result_unknown" in facts and "tool.call.reconciled" in facts
    assert "tool.call.completed" not in facts  # the value came from reconciliation
    [refund] = refunds_of(stack, "order-pa-4")
    assert final.output == f"refunded {refund['refundId']}"


def test_forged_approval_is_refused_and_nothing_runs(stack: AgentStack, rf: Runfacts) -> None:
    agent, run, result = first_turn(rf, "T-5", "order-pa-5", 7700)
    [part] = result.output.approvals
    forged = DeferredToolResults(approvals={part.tool_call_id: True})  # the client says "approved"
    with pytest.raises(ForgedResume, match="runfacts says pending"):
        asyncio.run(agent.run(message_history=result.all_messages(), deferred_tool_results=forged, deps=run))
    assert refunds_of(stack, "order-pa-5") == []
    assert approval_of(rf, run.id).args_hash == result.output.metadata[part.tool_call_id][META_KEY]["argsHash"]
    rf.decide(approval_of(rf, run.id), "reject", approver="bob")  # runfacts says no, the client says yes
    with pytest.raises(ForgedResume, match="runfacts says rejected"):
        asyncio.run(agent.run(message_history=result.all_messages(), deferred_tool_results=forged, deps=run))
    assert refunds_of(stack, "order-pa-5") == []


def test_agent_killed_while_waiting_resumes_after_approval_and_refunds_once(
        stack: AgentStack, rf: Runfacts, tmp_path: Path) -> None:
    saved = tmp_path / "state" / "refund-T-6.requests.json"  # the agent saved its history and waits
    out = killed_while_waiting_then_resumed(
        stack, rf, EXAMPLE, "refund-T-6", "order-pa-6", ["T-6", "order-pa-6", "3100"], ["--resume"],
        {"REFUND_AGENT_STATE": str(tmp_path / "state")}, lambda _: saved.exists())
    [refund] = refunds_of(stack, "order-pa-6")
    assert f"refunded {refund['refundId']}" in out


@pytest.mark.parametrize("deferral", [ApprovalRequired, CallDeferred])
def test_a_tool_raising_a_deferral_is_proposed_and_its_body_never_runs_again(
        stack: AgentStack, rf: Runfacts, deferral: type[Exception]) -> None:
    tools, bodies = FunctionToolset(), []

    @tools.tool_plain
    def refund(orderId: str, amountMinor: int, currency: str = "EUR") -> dict:  # noqa: N803
        bodies.append(orderId)
        raise deferral(metadata={"why": "over the limit"})

    agent = Agent(FunctionModel(example.scripted_model), toolsets=[tools], output_type=[str, DeferredToolRequests],
                  capabilities=[RunfactsApprovals({"refund": Gate("payments.refund", target="orderId")})])
    order = f"order-pa-7{deferral.__name__}"
    run = rf.start_run(goal="ticket:T-7", summary="Refund", user_id="customer-42", run_id=f"pa-T-7-{deferral.__name__}")
    result = asyncio.run(agent.run(f"refund {order} 800", deps=run))
    [part] = result.output.approvals
    assert result.output.metadata[part.tool_call_id][META_KEY]["approvalId"] == approval_of(rf, run.id).approval_id
    rf.decide(approval_of(rf, run.id), "approve", approver="alice")
    results = asyncio.run(resume_results(run, result.output, timeout=60))
    final = asyncio.run(agent.run(message_history=result.all_messages(), deferred_tool_results=results, deps=run))
    [refund_done] = refunds_of(stack, order)
    assert final.output == f"refunded {refund_done['refundId']}"
    assert bodies == [order]  # asked once; on resume runfacts' result came back, the body did not run


def test_tool_failing_after_approval_reaches_the_model_as_a_failed_result_and_never_runs_again(
        stack: AgentStack, rf: Runfacts) -> None:
    failures: list[Any] = []

    def model(messages: list[Any], info: object) -> ModelResponse:
        """Asks for the refund; told it failed, asks for the same refund once more, then reports."""
        failed = [p for p in messages[-1].parts if isinstance(p, ToolReturnPart) and p.outcome == "failed"]
        failures.extend(failed)
        if failed and len(failures) == 1:
            return ModelResponse(parts=[ToolCallPart("refund", {"orderId": "order-pa-8", "amountMinor": 2_000_000})])
        if failed:
            return ModelResponse(parts=[TextPart(f"not refunded: {failed[0].content}")])
        return ModelResponse(parts=[ToolCallPart("refund", {"orderId": "order-pa-8", "amountMinor": 2_000_000})])

    agent = Agent(FunctionModel(model), toolsets=[example.tools], output_type=[str, DeferredToolRequests],
                  capabilities=[RunfactsApprovals({"refund": Gate("payments.refund", target="orderId")})])
    run = rf.start_run(goal="ticket:T-8", summary="Refund", user_id="customer-42", run_id="pa-T-8")
    result = asyncio.run(agent.run("refund order-pa-8 2000000", deps=run))  # above the provider's limit
    rf.decide(approval_of(rf, run.id), "approve", approver="alice")
    results = asyncio.run(resume_results(run, result.output, timeout=60))
    final = asyncio.run(agent.run(message_history=result.all_messages(), deferred_tool_results=results, deps=run))
    assert final.output.startswith("not refunded: refund failed (refused: refund_declined")  # agent.run did not raise
    assert [f.tool_name for f in failures] == ["refund", "refund"]  # the model saw it, asked again, saw it again
    assert "will not run this call again" in failures[0].content
    facts = [e.event_type for e in run.journal.entries]
    assert facts.count("tool.call.dispatching") == 1 and facts.count("tool.call.failed") == 1  # ran once
    assert facts.count("tool.call.proposed") == 1  # the model's second ask was the same runfacts call
    assert refunds_of(stack, "order-pa-8") == []


def wait_result(run: Any, tool_call_id: str) -> Any:
    """The dispatcher's result of an authorized call (it runs whether or not the agent resumes)."""
    from runfacts.client import ToolCall

    return ToolCall(run, tool_call_id, "payments.refund", "", None).result(timeout=60)


def test_a_denial_in_the_resume_for_a_call_runfacts_executed_gives_the_model_the_real_result(
        stack: AgentStack, rf: Runfacts) -> None:
    agent, run, result = first_turn(rf, "T-9", "order-pa-9", 1500)
    [part] = result.output.approvals
    call_id = result.output.metadata[part.tool_call_id][META_KEY]["toolCallId"]
    rf.decide(approval_of(rf, run.id), "approve", approver="alice")  # approved in runfacts' console
    value = wait_result(run, call_id)  # the dispatcher ran it: the money moved
    for denial in (False, ToolDenied("the app's own reviewer clicked reject")):  # the app's UI says no
        final = asyncio.run(agent.run(message_history=result.all_messages(),
                                      deferred_tool_results=DeferredToolResults(approvals={part.tool_call_id: denial}),
                                      deps=run))
        assert final.output == f"refunded {value['refundId']}"  # never "denied" for a call that executed
    assert len(refunds_of(stack, "order-pa-9")) == 1


def test_a_denial_in_the_resume_for_a_call_runfacts_still_waits_on_is_refused(stack: AgentStack, rf: Runfacts) -> None:
    agent, run, result = first_turn(rf, "T-10", "order-pa-10", 1600)
    [part] = result.output.approvals
    denied = DeferredToolResults(approvals={part.tool_call_id: ToolDenied("no")})
    with pytest.raises(ForgedResume, match="the resume says denied but runfacts says pending"):
        asyncio.run(agent.run(message_history=result.all_messages(), deferred_tool_results=denied, deps=run))
    assert refunds_of(stack, "order-pa-10") == []  # a person may still approve it: the model was told nothing


def test_a_made_up_tool_result_in_the_resume_never_reaches_the_model(stack: AgentStack, rf: Runfacts) -> None:
    agent, run, result = first_turn(rf, "T-11", "order-pa-11", 1700)
    [part] = result.output.approvals
    call_id = result.output.metadata[part.tool_call_id][META_KEY]["toolCallId"]
    made_up = DeferredToolResults(calls={part.tool_call_id: {"refundId": "R-MADE-UP"}})
    with pytest.raises(ForgedResume, match="the resume says a tool result but runfacts says pending"):
        asyncio.run(agent.run(message_history=result.all_messages(), deferred_tool_results=made_up, deps=run))
    assert refunds_of(stack, "order-pa-11") == []  # nothing executed by the made-up result
    rf.decide(approval_of(rf, run.id), "approve", approver="alice")
    value = wait_result(run, call_id)
    final = asyncio.run(agent.run(message_history=result.all_messages(), deferred_tool_results=made_up, deps=run))
    assert final.output == f"refunded {value['refundId']}" != "refunded R-MADE-UP"  # replaced by the facts
    assert tool_returns(final.all_messages())[-1] == value


def test_a_made_up_tool_result_for_a_rejected_call_becomes_runfacts_denial(stack: AgentStack, rf: Runfacts) -> None:
    agent, run, result = first_turn(rf, "T-12", "order-pa-12", 1800)
    [part] = result.output.approvals
    rf.decide(approval_of(rf, run.id), "reject", approver="bob")
    asyncio.run(resume_results(run, result.output, timeout=60))  # waits until runfacts recorded it
    made_up = DeferredToolResults(calls={part.tool_call_id: {"refundId": "R-MADE-UP"}})
    final = asyncio.run(agent.run(message_history=result.all_messages(), deferred_tool_results=made_up, deps=run))
    assert final.output.startswith("not refunded: runfacts: rejected by bob")
    assert refunds_of(stack, "order-pa-12") == []


def test_a_call_with_missing_arguments_is_pydantic_ais_retry_and_never_reaches_an_approver(
        stack: AgentStack, rf: Runfacts) -> None:
    told: list[Any] = []

    def model(messages: list[Any], info: object) -> ModelResponse:
        """Asks for a refund without its amount; told what is wrong, reports it."""
        retry = [p for p in messages[-1].parts if isinstance(p, ToolReturnPart) and p.outcome == "retried"]
        if retry or told:
            told.extend(retry)
            return ModelResponse(parts=[TextPart("told to fix the arguments")])
        told.append(None)
        return ModelResponse(parts=[ToolCallPart("refund", {"orderId": "order-pa-13"})])

    agent = Agent(FunctionModel(model), toolsets=[example.tools], output_type=[str, DeferredToolRequests],
                  capabilities=[RunfactsApprovals({"refund": Gate("payments.refund", target="orderId")})])
    run = rf.start_run(goal="ticket:T-13", summary="Refund", user_id="customer-42", run_id="pa-T-13")
    result = asyncio.run(agent.run("refund order-pa-13", deps=run))
    assert result.output == "told to fix the arguments"  # not DeferredToolRequests: nobody is asked
    assert "amountMinor" in str(told[-1].content)  # Pydantic AI's own validation retry names the field
    facts = [e.event_type for e in run.journal.entries]
    assert "tool.call.proposed" not in facts and "approval.required" not in facts
