"""Governed MCP end to end on the real broker, the official MCP SDK on both sides: the SDK's
Client starts `runfacts mcp serve --tools mcp:<manifest>` over stdio; each tools/call becomes a
run's proposed call, decided by the real decider, executed by the real dispatcher on the
downstream MCPServer (a real process with a counting ledger). Exactly one execution in every
case: approve, client retry with the same idempotency key, lost answer, reject."""

from __future__ import annotations

import asyncio
import sqlite3
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from client_support import approval_of
from mcp import Client, MCPError
from mcp_support import CRASH_ACCOUNT, SLOW_ACCOUNT, McpStack, run_id_of, texts

from runfacts.demo.stack import DISPATCH_CRASH_POINT, DemoOptions
from runfacts.mcp import META_IDEMPOTENCY_KEY
from runfacts.settings import KafkaSettings

pytestmark = pytest.mark.integration
AGENT = "mcp-agent"


@pytest.fixture(scope="module")
def stack(kafka_bootstrap: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[McpStack]:
    options = DemoOptions(prefix=f"mcp-{uuid.uuid4().hex[:10]}", workdir=tmp_path_factory.mktemp("mcp"),
                          partitions=2, kafka=KafkaSettings(bootstrap_servers=kafka_bootstrap))
    stack = McpStack(options)
    try:
        stack.start()
        yield stack
    finally:
        stack.stop()


async def _decide(stack: McpStack, run_id: str, decision: str, progress: list[str] | None = None) -> None:
    """A person decides the pending approval (once the MCP client was told it waits for it)."""
    if progress is not None:
        for _ in range(600):
            if any("waiting for approval" in m for m in progress):
                break
            await asyncio.sleep(0.2)
        assert any("waiting for approval" in m for m in progress), f"no progress said so: {progress}"
    rf = stack.client()
    approval = await asyncio.to_thread(approval_of, rf, run_id, 120)
    assert approval.display is not None, "the approver sees the MCP call's arguments"
    assert "amount_minor" in {f.name for f in approval.display.fields}  # by the tool's inputSchema
    await asyncio.to_thread(rf.decide, approval, decision, approver="alice", timeout=90)


def _credit(client: Client, account: str, key: str, progress: list[str] | None = None,
            amount: int = 1250) -> Any:
    async def on_progress(_done: float, _total: float | None, message: str | None) -> None:
        if progress is not None and message:
            progress.append(message)
    return client.call_tool("ledger.credit", {"account": account, "amount_minor": amount},
                            progress_callback=on_progress, meta={META_IDEMPOTENCY_KEY: key})


def test_tools_are_listed_with_their_schema_and_bad_arguments_are_refused_before_any_proposal(
        stack: McpStack) -> None:
    async def scenario() -> None:
        async with Client(stack.serve_params()) as client:
            tools = {t.name: t for t in (await client.list_tools()).tools}
            assert sorted(tools) == ["ledger.balance", "ledger.credit", "ledger.note"]
            assert tools["ledger.credit"].input_schema["properties"]["amount_minor"]["exclusiveMinimum"] == 0
            assert "needs approval" in (tools["ledger.credit"].description or "")
            with pytest.raises(MCPError) as bad:
                await _credit(client, "acct-1", f"k-{uuid.uuid4().hex}", amount=-5)
            assert bad.value.code == -32602 and "amount_minor" in bad.value.message
            # a read-only tool needs no approval: the answer comes back directly
            balance = await client.call_tool("ledger.balance", {"account": "acct-none"})
            assert balance.structured_content == {"account": "acct-none", "balance_minor": 0}
    asyncio.run(scenario())
    assert stack.executions("acct-1") == []


def test_approved_call_executes_once_and_retries_of_the_same_key_get_the_same_result(stack: McpStack) -> None:
    account, key = "acct-101", f"k-{uuid.uuid4().hex}"
    run_id = run_id_of(AGENT, key)
    progress: list[str] = []

    async def scenario() -> list[Any]:
        async with Client(stack.serve_params()) as client:
            first = asyncio.ensure_future(_credit(client, account, key, progress))
            await asyncio.sleep(1)
            retry = asyncio.ensure_future(_credit(client, account, key))  # the client retries meanwhile
            await _decide(stack, run_id, "approve", progress)
            results = [await first, await retry]
        async with Client(stack.serve_params()) as again:  # a later retry from a new session
            results.append(await _credit(again, account, key))
        return results

    results = asyncio.run(scenario())
    values = [r.structured_content for r in results]
    assert values[0]["account"] == account and values[0]["amount_minor"] == 1250
    assert values[0] == values[1] == values[2]
    assert not any(r.is_error for r in results)
    assert {(r.meta or {}).get("io.runfacts/runId") for r in results} == {run_id}
    [(_request, key_sent)] = stack.executions(account)  # exactly one execution
    call_id = results[0].meta["io.runfacts/toolCallId"]
    assert stack.client().state(run_id).toolCalls[call_id].idempotencyKey == key_sent  # it travelled in _meta


def test_rejected_call_is_an_mcp_error_and_never_executes(stack: McpStack) -> None:
    account, key = "acct-102", f"k-{uuid.uuid4().hex}"

    async def scenario() -> MCPError:
        async with Client(stack.serve_params()) as client:
            call = asyncio.ensure_future(_credit(client, account, key))
            await _decide(stack, run_id_of(AGENT, key), "reject")
            with pytest.raises(MCPError) as rejected:
                await call
            return rejected.value

    error = asyncio.run(scenario())
    assert error.code == -32001 and "ApprovalRejected" in error.message
    assert error.data["io.runfacts/runId"] == run_id_of(AGENT, key)
    assert stack.executions(account) == []
    stack.wait(run_id_of(AGENT, key), "the run's end", "run.completed")  # nothing left open


def test_lost_answer_is_reconciled_by_the_lookup_tool_and_executes_once(stack: McpStack) -> None:
    key = f"k-{uuid.uuid4().hex}"
    run_id = run_id_of(AGENT, key)

    async def scenario() -> Any:
        async with Client(stack.serve_params()) as client:
            call = asyncio.ensure_future(_credit(client, CRASH_ACCOUNT, key, amount=900))
            await _decide(stack, run_id, "approve")
            return await call

    result = asyncio.run(scenario())
    assert not result.is_error, texts(result)
    assert result.structured_content["amount_minor"] == 900
    assert len(stack.executions(CRASH_ACCOUNT)) == 1  # the server died after the credit: never re-run
    stack.wait(run_id, "the reconciliation", "tool.call.reconciled", outcome="found_completed")
    types = [e.eventType for e in stack.log.of(run_id)] if stack.log else []
    assert "tool.call.result_unknown" in types and "tool.call.completed" not in types


def test_over_http_the_api_key_is_the_actor_and_an_unknown_key_is_refused(stack: McpStack) -> None:
    import httpx2
    from mcp.client.streamable_http import streamable_http_client

    account, key = "acct-103", f"k-{uuid.uuid4().hex}"
    run_id = run_id_of("bot-7", key)

    def client(url: str, api_key: str) -> Client:
        headers = {"Authorization": f"Bearer {api_key}"}
        return Client(streamable_http_client(url, http_client=httpx2.AsyncClient(headers=headers, timeout=200)))

    async def scenario(url: str) -> Any:
        async with client(url, "wrong") as intruder:
            with pytest.raises(MCPError) as refused:
                await _credit(intruder, account, key)
            assert refused.value.code == -32006 and "API key" in refused.value.message
        async with client(url, "s3cret-7") as bot:
            progress: list[str] = []
            call = asyncio.ensure_future(_credit(bot, account, key, progress))
            await _decide(stack, run_id, "approve", progress)
            return await call

    with stack.serve_http({"bot-7": "s3cret-7"}) as url:
        result = asyncio.run(scenario(url))
    assert result.structured_content["account"] == account
    assert len(stack.executions(account)) == 1
    assert stack.client().state(run_id).createdBy.subjectId == "bot-7"  # the API key's subject is the actor


def test_an_approval_nobody_gives_expires_as_an_mcp_error_and_never_executes(stack: McpStack) -> None:
    account, key = "acct-104", f"k-{uuid.uuid4().hex}"

    async def scenario() -> MCPError:
        async with Client(stack.serve_params()) as client:
            with pytest.raises(MCPError) as expired:
                await client.call_tool("ledger.note", {"account": account, "text": "call me"},
                                       meta={META_IDEMPOTENCY_KEY: key})
            return expired.value

    error = asyncio.run(scenario())
    assert error.code == -32002 and "ApprovalExpired" in error.message
    assert stack.executions(account) == []


def test_dispatcher_killed_after_the_tool_ran_is_reconciled_by_lookup_and_executes_once(stack: McpStack) -> None:
    """The dispatcher dies between the tool's side effect and its report (a crash point, as a
    kill -9 there); its successor has no memory of the call: the lookup tool answers."""
    account, key = "acct-105", f"k-{uuid.uuid4().hex}"
    run_id = run_id_of(AGENT, key)
    stack._terminate("dispatcher")
    stack.start_dispatcher(crash_at=DISPATCH_CRASH_POINT)

    async def scenario() -> Any:
        async with Client(stack.serve_params()) as client:
            progress: list[str] = []
            call = asyncio.ensure_future(_credit(client, account, key, progress, amount=105))
            await _decide(stack, run_id, "approve", progress)
            exit_code = await asyncio.to_thread(stack.wait_exit, "dispatcher", 90)
            assert exit_code is not None, "the dispatcher did not reach its crash point"
            stack.forget("dispatcher")
            assert len(stack.executions(account)) == 1  # it did act before dying
            stack.start_dispatcher()
            return await call

    result = asyncio.run(scenario())
    assert result.structured_content["amount_minor"] == 105
    assert len(stack.executions(account)) == 1
    stack.wait(run_id, "the reconciliation", "tool.call.reconciled", outcome="found_completed")


def test_a_call_still_waiting_answers_so_and_its_retry_with_the_key_gets_the_one_result(stack: McpStack) -> None:
    account, key = "acct-106", f"k-{uuid.uuid4().hex}"
    run_id = run_id_of(AGENT, key)

    async def scenario() -> Any:
        async with Client(stack.serve_params(wait_s=3)) as impatient:
            with pytest.raises(MCPError) as waiting:
                await _credit(impatient, account, key)
            assert waiting.value.code == -32005 and "same idempotency key" in waiting.value.message
        async with Client(stack.serve_params()) as client:  # the client retries later
            progress: list[str] = []
            call = asyncio.ensure_future(_credit(client, account, key, progress))
            await _decide(stack, run_id, "approve", progress)
            return await call

    result = asyncio.run(scenario())
    assert result.structured_content["account"] == account
    assert len(stack.executions(account)) == 1


def test_dispatcher_sigkilled_while_the_call_is_in_flight_still_executes_exactly_once(stack: McpStack) -> None:
    """kill -9 of the dispatcher while the downstream tool works on the call: its successor
    reconciles (the lookup finds the credit, or finds nothing and re-sends with the same key)."""
    key = f"k-{uuid.uuid4().hex}"
    run_id = run_id_of(AGENT, key)

    async def scenario() -> Any:
        async with Client(stack.serve_params()) as client:
            progress: list[str] = []
            call = asyncio.ensure_future(_credit(client, SLOW_ACCOUNT, key, progress, amount=901))
            await _decide(stack, run_id, "approve", progress)
            await asyncio.to_thread(stack.wait, run_id, "the dispatch", "tool.call.dispatching", 90)
            await asyncio.sleep(1)  # the tool is sleeping before its write
            stack.procs["dispatcher"].kill()  # SIGKILL
            stack.procs["dispatcher"].wait(30)
            stack.forget("dispatcher")
            stack.start_dispatcher()
            return await call

    result = asyncio.run(scenario())
    assert result.structured_content["amount_minor"] == 901
    assert len({k for _r, k in stack.executions(SLOW_ACCOUNT)}) == 1  # one key
    with sqlite3.connect(stack.dir / "ledger.db") as db:
        credits = db.execute("SELECT COUNT(*) FROM credits WHERE account = ?", (SLOW_ACCOUNT,)).fetchone()[0]
    assert credits == 1  # exactly one credit
