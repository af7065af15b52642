"""Typed usage of runfacts.client, checked with `mypy --strict` by tests/unit/client/test_typing.py:
a signature that regresses (a return type lost to Any, a parameter renamed) fails that test."""

from __future__ import annotations

from typing import Any, assert_type

from pydantic import BaseModel

from runfacts.client import Agent, Approval, ClientCore, Decision, Run, Runfacts, ToolCall
from runfacts.testing import TestStack
from runfacts.tools import ToolContext, ToolRegistry

registry = ToolRegistry("typed")


class Credit(BaseModel):
    account: str
    amount_cents: int


@registry.tool("billing.credit", risk="high", needs_approval=True)
def credit(account: str, amount_cents: int, ctx: ToolContext) -> Credit:
    return Credit(account=account, amount_cents=amount_cents)


@registry.tool("billing.balance", read_only=True)
async def balance(account: str, ctx: ToolContext) -> int:
    return 0


def agent(rf: ClientCore) -> Credit:
    run = rf.start_run(goal="ticket:T-1", summary="credit", user_id="u-1", budget={"toolCalls": 2})
    assert_type(run, Run)
    assert_type(run.reason("owed", evidence=["order:o-1"]), int | None)
    call = run.propose(credit, {"account": "acct-1", "amount_cents": 500}, target="acct-1", summary="credit")
    assert_type(call, ToolCall[Credit])
    assert_type(run.propose(balance, {"account": "acct-1"}, target="acct-1").result(timeout=5), int)
    assert_type(run.propose("billing.credit", {"account": "a"}, target="a"), ToolCall[Any])
    assert_type(call.decision(timeout=5), Decision)
    pending: list[Approval] = rf.approvals(role="support_agent")
    assert_type(rf.decide(pending[0], "approve", approver="alice"), int | None)
    value = call.result(timeout=60)
    assert_type(value, Credit)
    assert_type(run.complete(outcome=f"credit:{value.account}"), int | None)
    assert_type(run.view(), dict[str, Any])
    assert_type(rf.open_runs(), list[Run])
    return value


async def agent_async(rf: Runfacts) -> Credit:
    run = await rf.start_run_async(goal="ticket:T-2", summary="credit", user_id="u-1")
    assert_type(await run.reason_async("owed", evidence=["order:o-2"]), int | None)
    call = await run.propose_async(credit, {"account": "acct-2", "amount_cents": 700}, target="acct-2")
    assert_type(call, ToolCall[Credit])
    assert_type(await run.propose_async(balance, {"account": "acct-2"}, target="acct-2"), ToolCall[int])
    approvals = await rf.approvals_async(role="support_agent")
    assert_type(approvals, list[Approval])
    assert_type(await rf.decide_async(approvals[0], "approve", approver="alice"), int | None)
    assert_type(await call.decision_async(timeout=5), Decision)
    value = await call.result_async(timeout=60)
    assert_type(await run.complete_async(), int | None)
    assert_type(await run.view_async(min_version=1), dict[str, Any])
    assert_type(await rf.view_async(run.id, "operator"), dict[str, Any])
    assert_type(await rf.run_async(run.id), Run)
    return value


def served(rf: Runfacts) -> None:
    @rf.agent("credits")
    def credits(run: Run) -> None:
        run.propose(credit, {"account": run.goal, "amount_cents": 100}, target=run.goal).result()

    assert_type(credits, Agent)
    assert_type(credits.submit(goal="acct-1", summary="credit", user_id="u-1"), Run)
    assert_type(credits.recover(), list[str])
    credits.serve()


def on_the_test_stack() -> Credit:
    with TestStack(registry) as stack:
        return agent(stack.client())  # the test stack's client is a ClientCore, as Runfacts is
