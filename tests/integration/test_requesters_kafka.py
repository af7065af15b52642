"""Who asked and re-authorization (issue 33.1 and 33.8) on the real broker with real workers
(decider, dispatcher, payment simulator as subprocesses) and the real frameworks' test models:

- the run's own user approving their own refund is refused (`self_approval_forbidden`) through the
  client (`rf.decide`), the CLI (`runfacts approve`), and each bridge (Pydantic AI, OpenAI Agents,
  LangGraph's `approver=` hook); another support agent's approval goes through;
- LangGraph's `approver=` hook is not an authorization: a name it returns carries no roles and
  the decider refuses it (`forbidden_role`);
- after an expiry, proposing the same call again opens a new approval (same arguments, same
  idempotency key) through the client and each bridge, which a person then decides; the late
  approve of the expired one stays rejected. (The stack's dispatcher serves `payments.refund`
  only, so the short-window capability's new approvals are rejected here: approving one would
  authorize a call no adapter serves; the decider tests cover a re-authorized call's dispatch.)"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import pytest
from client_support import AgentStack, approval_of, bridge_fixtures, load_example, refunds_of
from ops_support import TOKENS, write_users
from typer.testing import CliRunner

from runfacts.cli import app
from runfacts.client import ApprovalExpired, ApprovalRejected, CommandRejected, Runfacts
from runfacts.integrations import facts
from runfacts.schemas.common import Actor

pytestmark = pytest.mark.integration
EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
REFUND, EXPIRING = "payments.refund", "payments.refund.expiring"

stack, rf = bridge_fixtures("requesters", approval_ttl_ms=8_000)  # each new approval is decided within it


def refund_args(order: str, amount: int) -> dict[str, Any]:
    return {"orderId": order, "amountMinor": amount, "currency": "EUR"}


def refused(exc: pytest.ExceptionInfo[CommandRejected]) -> str:
    return exc.value.reason


# --- the client and the CLI -----------------------------------------------------------------

def test_client_decide_refuses_the_runs_own_user_and_accepts_another_support_agent(
        stack: AgentStack, rf: Runfacts) -> None:
    run = rf.start_run(goal="ticket:T-Q1", summary="Refund", user_id="alice", run_id="rq-T-Q1")
    call = run.propose(REFUND, refund_args("order-q1", 4200), target="order-q1")
    approval = approval_of(rf, run.id)
    assert approval.requesters == ("alice",)  # the run's user; never the harness's service identity

    with pytest.raises(CommandRejected) as own:
        rf.decide(approval, "approve", approver="alice")

    assert refused(own) == "self_approval_forbidden" and "alice is a requester" in own.value.detail
    assert refunds_of(stack, "order-q1") == [] and rf.state(run.id).approvals[approval.approval_id].status == "open"
    rf.decide(approval, "approve", approver="bob")
    assert call.result(timeout=120)["orderId"] == "order-q1"
    assert len(refunds_of(stack, "order-q1")) == 1


def test_cli_approve_is_refused_as_self_approval_when_the_cli_user_is_the_runs_user(
        stack: AgentStack, rf: Runfacts, tmp_path: Path) -> None:
    run = rf.start_run(goal="ticket:T-Q2", summary="Refund", user_id="alice", run_id="rq-T-Q2")
    run.propose(REFUND, refund_args("order-q2", 900), target="order-q2")
    approval = approval_of(rf, run.id)
    env = {**stack.env(), "RUNFACTS_USERS_FILE": str(write_users(tmp_path / "users.toml")),
           "RUNFACTS_USER": "alice", "RUNFACTS_TOKEN": TOKENS["alice"], "COLUMNS": "200"}

    result = CliRunner().invoke(app, ["approve", approval.approval_id, "--run", run.id], env=env)

    assert result.exit_code == 3, result.output
    assert "[self_approval_forbidden]" in result.output
    assert rf.state(run.id).approvals[approval.approval_id].status == "open"
    assert refunds_of(stack, "order-q2") == []


def test_client_propose_again_after_an_expiry_opens_a_new_approval_and_refunds_once(
        stack: AgentStack, rf: Runfacts) -> None:
    run = rf.start_run(goal="ticket:T-Q3", summary="Refund", user_id="customer-42", run_id="rq-T-Q3")
    args = refund_args("order-q3", 700)
    first = run.propose(EXPIRING, args, target="order-q3")
    stale = approval_of(rf, run.id)
    with pytest.raises(ApprovalExpired, match="propose again"):
        first.result(timeout=60)

    again = run.propose(EXPIRING, args, target="order-q3")  # as the error says

    assert again.id == f"{first.id}-r1" and again.approval_id == f"approval-{first.id}-r1"
    fresh = approval_of(rf, run.id)
    assert fresh.approval_id == again.approval_id and fresh.args_hash == stale.args_hash
    assert run.propose(EXPIRING, args, target="order-q3").id == again.id  # the same call, no new request
    with pytest.raises(CommandRejected) as late:
        rf.decide(stale, "approve", approver="bob")
    assert refused(late) == "approval_expired"
    state = rf.state(run.id)
    assert state.toolCalls[again.id].idempotencyKey == state.toolCalls[first.id].idempotencyKey
    assert [a.approvalId for a in state.open_approvals()] == [again.approval_id]
    rf.decide(fresh, "reject", approver="bob")  # the new approval is live: a person decides it
    with pytest.raises(ApprovalRejected, match="bob"):
        again.result(timeout=60)
    assert refunds_of(stack, "order-q3") == []


# --- Pydantic AI --------------------------------------------------------------------------------

def _pydantic_turn(run: Any, capability: str, order: str, amount: int) -> tuple[Any, Any]:
    pytest.importorskip("pydantic_ai")
    example = load_example(EXAMPLES / "pydantic_ai_refund.py")
    agent = example.build_agent(capability)
    return agent, asyncio.run(agent.run(f"refund {order} {amount}", deps=run))


def test_pydantic_ai_refund_of_the_runs_own_user_is_refused_to_them(stack: AgentStack, rf: Runfacts) -> None:
    from runfacts.integrations.pydantic_ai import META_KEY
    run = rf.start_run(goal="ticket:T-Q4", summary="Refund", user_id="alice", run_id="rq-T-Q4")
    _, result = _pydantic_turn(run, REFUND, "order-q4", 1100)
    meta = result.output.metadata[result.output.approvals[0].tool_call_id][META_KEY]

    with pytest.raises(CommandRejected) as own:
        rf.decide(approval_of(rf, run.id), "approve", approver="alice")

    assert refused(own) == "self_approval_forbidden"
    assert facts.verdict(run.id, run.journal.entries, meta["toolCallId"]).status == "pending"


def test_pydantic_ai_asking_again_after_an_expiry_opens_a_new_approval(stack: AgentStack, rf: Runfacts) -> None:
    from runfacts.integrations.pydantic_ai import META_KEY, resume_results
    run = rf.start_run(goal="ticket:T-Q5", summary="Refund", user_id="customer-42", run_id="rq-T-Q5")
    agent, result = _pydantic_turn(run, EXPIRING, "order-q5", 600)
    first = result.output.metadata[result.output.approvals[0].tool_call_id][META_KEY]
    denied = asyncio.run(resume_results(run, result.output, timeout=60))  # nobody decides in 8 s
    assert "expired" in next(iter(denied.approvals.values())).message  # type: ignore[union-attr]

    agent, again = _pydantic_turn(run, EXPIRING, "order-q5", 600)  # the model asks again

    meta = again.output.metadata[again.output.approvals[0].tool_call_id][META_KEY]
    assert (meta["toolCallId"], meta["status"]) == (f"{first['toolCallId']}-r1", "pending")
    assert meta["approvalId"] == approval_of(rf, run.id).approval_id != first["approvalId"]
    rf.decide(approval_of(rf, run.id), "reject", approver="bob")
    results = asyncio.run(resume_results(run, again.output, timeout=60))
    final = asyncio.run(agent.run(message_history=again.all_messages(), deferred_tool_results=results, deps=run))
    assert final.output.startswith("not refunded: runfacts: rejected by bob")
    assert refunds_of(stack, "order-q5") == []


# --- OpenAI Agents SDK ---------------------------------------------------------------------------

def _openai_turn(run: Any, capability: str, order: str, amount: int) -> tuple[Any, Any, Any]:
    pytest.importorskip("agents")
    from agents import Runner
    example = load_example(EXAMPLES / "openai_agents_refund.py")
    agent = example.build_agent(order, amount, capability)
    return example, agent, asyncio.run(Runner.run(agent, f"refund {order} {amount}", context=run,
                                                  run_config=example.NO_NETWORK))


def test_openai_agents_refund_of_the_runs_own_user_is_refused_to_them(stack: AgentStack, rf: Runfacts) -> None:
    from runfacts.integrations.openai_agents import approval_requests
    run = rf.start_run(goal="ticket:T-Q6", summary="Refund", user_id="alice", run_id="rq-T-Q6")
    example, _, result = _openai_turn(run, REFUND, "order-q6", 1300)
    [request] = approval_requests(run, result.to_state(), example.gates()).values()

    with pytest.raises(CommandRejected) as own:
        rf.decide(approval_of(rf, run.id), "approve", approver="alice")

    assert refused(own) == "self_approval_forbidden"
    assert facts.verdict(run.id, run.journal.entries, request["toolCallId"]).status == "pending"


def test_openai_agents_asking_again_after_an_expiry_opens_a_new_approval(stack: AgentStack, rf: Runfacts) -> None:
    from agents import Runner

    from runfacts.integrations.openai_agents import approval_requests, resume_state
    run = rf.start_run(goal="ticket:T-Q7", summary="Refund", user_id="customer-42", run_id="rq-T-Q7")
    example, agent, result = _openai_turn(run, EXPIRING, "order-q7", 650)
    gates = example.gates(EXPIRING)
    [first] = approval_requests(run, result.to_state(), gates).values()
    state = asyncio.run(resume_state(run, result.to_state(), gates, timeout=60))  # expires: rejected
    final = asyncio.run(Runner.run(agent, state, run_config=example.NO_NETWORK))
    assert "approval expired" in final.final_output

    example, agent, again = _openai_turn(run, EXPIRING, "order-q7", 650)  # the model asks again

    [request] = approval_requests(run, again.to_state(), gates).values()
    assert request["toolCallId"] == f"{first['toolCallId']}-r1" and request["approvalId"] != first["approvalId"]
    rf.decide(approval_of(rf, run.id), "reject", approver="bob")
    state = asyncio.run(resume_state(run, again.to_state(), gates, timeout=60))
    final = asyncio.run(Runner.run(agent, state, run_config=example.NO_NETWORK))
    assert final.final_output == "not refunded: runfacts: rejected by bob"
    assert refunds_of(stack, "order-q7") == []


# --- LangGraph -------------------------------------------------------------------------------------

def _graph(rf: Runfacts, ticket: str, user: str, capability: str = REFUND, **options: Any) -> tuple[Any, Any, Any]:
    pytest.importorskip("langgraph")
    from langchain_core.messages import HumanMessage
    from langgraph.checkpoint.memory import InMemorySaver
    example = load_example(EXAMPLES / "langgraph_refund.py")
    run = rf.start_run(goal=f"ticket:{ticket}", summary="Refund", user_id=user, run_id=f"rq-{ticket}")
    graph = example.build(rf, capability, settle_s=2.0, **options).compile(checkpointer=InMemorySaver())
    config = {"configurable": {"thread_id": run.id}}
    first = graph.invoke({"messages": [HumanMessage(f"refund order-{ticket.lower()} 800")]}, config)
    return graph, config, first["__interrupt__"][0].value


@pytest.mark.parametrize(("who", "reason"), [
    (Actor(subjectId="alice", roles=("support_agent",), authSource="dashboard"), "self_approval_forbidden"),
    ("mallory", "forbidden_role"),  # a bare name: no roles, whatever the hook says
    (Actor(subjectId="mallory", roles=(), authSource="dashboard"), "forbidden_role"),
], ids=["own-user", "bare-name", "no-role"])
def test_langgraph_approver_hook_is_no_authorization_the_decider_refuses_its_actor(
        stack: AgentStack, rf: Runfacts, who: Any, reason: str) -> None:
    from langgraph.types import Command
    ticket = f"T-Q8{reason[:4]}{'n' if isinstance(who, str) else ''}"
    graph, config, asked = _graph(rf, ticket, "alice", approver=lambda cfg: who)

    again = graph.invoke(Command(resume={"approvalId": asked["approvalId"], "decision": "approve"}), config)

    [interrupt] = again["__interrupt__"]
    assert f"the decision was refused: {reason}" in interrupt.value["refused"]
    assert rf.state(f"rq-{ticket}").approvals[asked["approvalId"]].status == "open"
    assert refunds_of(stack, f"order-{ticket.lower()}") == []


def test_langgraph_approver_hook_with_an_authenticated_actor_goes_through(stack: AgentStack, rf: Runfacts) -> None:
    from langgraph.types import Command
    bob = Actor(subjectId="bob", roles=("support_agent",), authSource="dashboard")
    graph, config, asked = _graph(rf, "T-Q9", "alice", approver=lambda cfg: bob)

    result = graph.invoke(Command(resume={"approvalId": asked["approvalId"], "decision": "approve"}), config)

    [refund] = refunds_of(stack, "order-t-q9")
    assert refund["refundId"] in result["messages"][-1].content


def test_langgraph_model_asking_again_after_an_expiry_gets_a_new_approval(stack: AgentStack, rf: Runfacts) -> None:
    from langchain_core.messages import HumanMessage
    from langgraph.types import Command
    graph, config, asked = _graph(rf, "T-Q10", "customer-42", EXPIRING)
    time.sleep(10)  # the 8 s approval window passes
    expired = graph.invoke(Command(resume="woken"), config)
    assert "(runfacts: expired)" in expired["messages"][-1].content  # the model was told, once

    again = graph.invoke({"messages": [HumanMessage("refund order-t-q10 800")]}, config)  # it asks again

    [interrupt] = again["__interrupt__"]
    assert interrupt.value["toolCallId"] == f"{asked['toolCallId']}-r1"
    assert interrupt.value["approvalId"] != asked["approvalId"]
    rf.decide(approval_of(rf, "rq-T-Q10"), "reject", approver="bob")
    done = graph.invoke(Command(resume="woken"), config)
    assert "(runfacts: rejected): rejected by bob" in done["messages"][-1].content
    assert refunds_of(stack, "order-t-q10") == []
