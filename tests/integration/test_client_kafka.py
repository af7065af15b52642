"""runfacts.client on the real broker with real workers (decider, dispatcher, payment simulator
as subprocesses): the refund agent of examples/ end to end, a lost response, the agent killed
with SIGKILL while waiting for approval and re-attached with open_runs, a rejected and an
expired approval, awaitable waits, and bad input refused with typed errors."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from client_support import AgentStack, agent_stack, approval_of, refunds_of

from runfacts.client import (
    ApprovalExpired,
    ApprovalRejected,
    BadArgument,
    CommandRejected,
    Runfacts,
    RunNeedsReview,
)
from runfacts.client.follower import FollowerSettings, read_run
from runfacts.schemas.errors import ConfigError, InfrastructureError

pytestmark = pytest.mark.integration
REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "examples" / "refund_agent.py"
REFUND = "payments.refund"


@pytest.fixture(scope="module")
def stack(kafka_bootstrap: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[AgentStack]:
    with agent_stack(kafka_bootstrap, tmp_path_factory.mktemp("client")) as running:
        yield running


@pytest.fixture(scope="module")
def rf(stack: AgentStack) -> Iterator[Runfacts]:
    client = stack.client()
    yield client
    client.close()




def agent(stack: AgentStack, *args: str) -> subprocess.Popen[str]:
    env = {**os.environ, **stack.env()}
    return subprocess.Popen([sys.executable, str(EXAMPLE), *args], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)




def test_refund_agent_example_runs_end_to_end_with_a_person_approving(stack: AgentStack, rf: Runfacts) -> None:
    proc = agent(stack, "T-1001", "order-1001", "4200")
    approval = approval_of(rf, "refund-T-1001")
    assert (approval.asks, approval.required_role) == ("refund on order-1001 (high risk)", "support_agent")
    version = rf.decide(approval, "approve", approver="alice")
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err[-3000:]
    [refund] = refunds_of(stack, "order-1001")
    state = rf.state("refund-T-1001")
    assert state.status == "completed" and version is not None and state.version > version
    assert refund["refundId"] in out  # the agent printed the value call.result() returned
    cli = subprocess.run([sys.executable, "-m", "runfacts.cli", "events", "refund-T-1001"], env={
        **os.environ, **stack.env(), "COLUMNS": "200"}, capture_output=True, text=True, timeout=60)
    assert cli.returncode == 0, cli.stderr
    for fact in ("run.created", "approval.required", "approval.granted", "tool.call.completed", "run.completed"):
        assert fact in cli.stdout
    assert "customer-42" not in cli.stdout  # personal fields are redacted
    missing = subprocess.run([sys.executable, "-m", "runfacts.cli", "events", "no-such-run"],
                             env={**os.environ, **stack.env()}, capture_output=True, text=True, timeout=60)
    assert missing.returncode == 1 and "no facts" in missing.stderr


def test_start_run_twice_is_the_same_run_and_view_reads_its_own_writes(rf: Runfacts) -> None:
    run = rf.start_run(goal="ticket:T-1002", summary="Refund", user_id="customer-42", run_id="rw-T-1002")
    again = rf.start_run(goal="ticket:T-1002", summary="Refund", user_id="customer-42", run_id="rw-T-1002")
    assert again.id == run.id and again.version == run.version
    version = run.progress("ask the customer for a photo", verified=["order:order-1002"])
    assert version is not None and version > (run.version or 0) - 1
    view = run.view(min_version=version, timeout=30)
    assert view["version"] >= version and view["progress"]["nextSafeAction"] == "ask the customer for a photo"
    assert run.complete() == version + 3  # run.completed, the final checkpoint, checkpoint.archived


def test_rejected_approval_raises_approval_rejected_and_refunds_nothing(stack: AgentStack, rf: Runfacts) -> None:
    run = rf.start_run(goal="ticket:T-1003", summary="Refund", user_id="customer-42", run_id="rej-T-1003")
    call = run.propose(REFUND, {"orderId": "order-1003", "amountMinor": 990, "currency": "EUR"}, target="order-1003")
    rf.decide(approval_of(rf, run.id), "reject", approver="alice")
    with pytest.raises(ApprovalRejected, match="alice"):
        call.result(timeout=60)
    with pytest.raises(ApprovalRejected):
        call.decision(timeout=5)
    assert refunds_of(stack, "order-1003") == []


def test_expired_approval_raises_approval_expired_and_a_late_decision_is_rejected(
        stack: AgentStack, rf: Runfacts) -> None:
    run = rf.start_run(goal="ticket:T-1004", summary="Refund", user_id="customer-42", run_id="exp-T-1004")
    call = run.propose("payments.refund.expiring", {"orderId": "order-1004", "amountMinor": 500, "currency": "EUR"},
                       target="order-1004")
    pending = approval_of(rf, run.id)
    with pytest.raises(ApprovalExpired):
        call.result(timeout=60)
    with pytest.raises(CommandRejected) as late:
        rf.decide(pending, "approve", approver="alice")
    assert late.value.reason == "approval_expired"
    assert refunds_of(stack, "order-1004") == []


def test_lost_response_still_gives_the_agent_its_result(stack: AgentStack, rf: Runfacts) -> None:
    run = rf.start_run(goal="ticket:T-1005", summary="Refund", user_id="customer-42", run_id="lost-T-1005")
    call = run.propose(REFUND, {"orderId": "order-1005", "amountMinor": 1200, "currency": "EUR"}, target="order-1005")
    stack.provider("POST", "/_faults", {"acceptThenDropNext": 1})
    rf.decide(approval_of(rf, run.id), "approve", approver="alice")
    value = call.result(timeout=120)
    facts = [e.event.eventType for e in run.journal.entries]
    assert "tool.call.result_unknown" in facts and "tool.call.reconciled" in facts
    assert "tool.call.completed" not in facts  # success arrived only as reconciled(found_completed)
    [refund] = refunds_of(stack, "order-1005")
    check_value(value, refund)


def check_value(value: Any, refund: dict[str, Any]) -> None:
    """The agent's value is the refund the provider executed."""
    assert isinstance(value, dict) and value.get("refundId") == refund["refundId"], (value, refund)


def test_agent_killed_while_waiting_for_approval_resumes_with_open_runs_and_refunds_once(
        stack: AgentStack, rf: Runfacts) -> None:
    first = agent(stack, "T-1006", "order-1006", "3100")
    approval = approval_of(rf, "refund-T-1006")
    first.send_signal(signal.SIGKILL)
    first.wait(30)
    assert first.returncode == -signal.SIGKILL
    rf.decide(approval, "approve", approver="alice")  # approved while the agent is dead
    second = agent(stack, "--resume")
    out, err = second.communicate(timeout=120)
    assert second.returncode == 0, err[-3000:]
    [refund] = refunds_of(stack, "order-1006")  # exactly one side effect
    assert refund["refundId"] in out
    assert rf.state("refund-T-1006").status == "completed"


def test_waits_are_awaitable_and_served_by_one_follower(stack: AgentStack, rf: Runfacts) -> None:
    runs = [rf.start_run(goal=f"ticket:T-20{i}", summary="Refund", user_id="customer-42", run_id=f"aw-T-20{i}")
            for i in range(3)]
    calls = [r.propose(REFUND, {"orderId": f"order-20{i}", "amountMinor": 100 + i, "currency": "EUR"},
                       target=f"order-20{i}") for i, r in enumerate(runs)]
    for r in runs:
        rf.decide(approval_of(rf, r.id), "approve", approver="alice")

    threads_before = threading.active_count()
    followers = [t.name for t in threading.enumerate()].count("runfacts-client-follower")  # other tests' clients too

    async def gather() -> list[Any]:
        waits = [asyncio.ensure_future(c.result_async(timeout=120)) for c in calls]
        await asyncio.sleep(0.2)
        assert threading.active_count() <= threads_before  # a wait is a future, not a thread (others may end)
        return await asyncio.gather(*waits)

    values = asyncio.run(gather())
    assert followers >= 1 and [t.name for t in threading.enumerate()].count("runfacts-client-follower") == followers
    for i, value in enumerate(values):
        [refund] = refunds_of(stack, f"order-20{i}")
        check_value(value, refund)
    assert Runfacts.connect(kafka=rf.kafka, prefix=rf.names.prefix, args_store=stack.args_store) is rf


def test_every_command_has_an_awaitable_form_that_never_blocks_the_event_loop(stack: AgentStack,
                                                                              rf: Runfacts) -> None:
    """The guide's story in async code: start_run_async ... complete_async, approvals_async and
    decide_async as the UI; a ticker keeps running meanwhile (no command blocks the loop), and
    a refusal raises the same typed error as the blocking form."""

    async def story() -> tuple[Any, int, dict[str, Any]]:
        ticks = 0

        async def ticker() -> None:
            nonlocal ticks
            while True:
                await asyncio.sleep(0.005)
                ticks += 1

        beat = asyncio.ensure_future(ticker())
        run = await rf.start_run_async(goal="ticket:T-3001", summary="Refund", user_id="customer-42",
                                       run_id="async-T-3001")
        assert (await rf.start_run_async(goal="ticket:T-3001", summary="Refund", user_id="customer-42",
                                         run_id="async-T-3001")).id == run.id  # idempotent, as start_run
        await run.reason_async("damaged on arrival", evidence=["order:order-3001"])
        call = await run.propose_async(REFUND, {"orderId": "order-3001", "amountMinor": 3001, "currency": "EUR"},
                                       target="order-3001")
        again = await run.propose_async(REFUND, {"orderId": "order-3001", "amountMinor": 3001, "currency": "EUR"},
                                        target="order-3001")
        assert again.id == call.id  # proposed again: the same call
        with pytest.raises(CommandRejected) as refused:
            await run.propose_async("payments.teleport", {"to": "moon"}, target="order-x")
        assert refused.value.reason == "unknown_capability"
        pending: list[Any] = []
        while not pending:
            pending = [a for a in await rf.approvals_async(role="support_agent") if a.run_id == run.id]
        before = ticks
        assert await rf.decide_async(pending[0], "approve", approver="alice") is not None
        value = await call.result_async(timeout=120)
        assert (await call.decision_async(timeout=5)).approver == "alice"
        version = await run.complete_async(outcome="refund:order-3001")
        assert version is not None
        view = await run.view_async(min_version=version)
        beat.cancel()
        return value, ticks - before, view

    value, ticked, view = asyncio.run(story())
    [refund] = refunds_of(stack, "order-3001")
    check_value(value, refund)
    assert view["status"] == "completed"
    assert ticked >= 5  # the loop ran while the decision, the dispatch and the completion were awaited


def test_bad_input_is_refused_with_typed_errors_naming_the_argument(stack: AgentStack, rf: Runfacts) -> None:
    with pytest.raises(BadArgument, match="goal"):
        rf.start_run(goal="", summary="x", user_id="u", run_id="bad-1")
    with pytest.raises(BadArgument, match=r"budget\['coins'\]"):
        rf.start_run(goal="g", summary="x", user_id="u", budget={"coins": 3}, run_id="bad-1")
    run = rf.start_run(goal="ticket:bad", summary="x", user_id="u", run_id="bad-2")
    with pytest.raises(BadArgument, match=r"args\['when'\]"):
        run.propose(REFUND, {"when": object()}, target="order-x")
    with pytest.raises(BadArgument, match="evidence"):
        run.reason("because", evidence=["the customer said the kettle arrived broken"])
    with pytest.raises(CommandRejected) as unknown:
        run.propose("payments.teleport", {"to": "moon"}, target="order-x")
    assert unknown.value.reason == "unknown_capability"
    with pytest.raises(BadArgument, match="error_class"):
        run.fail("Tool Down")
    with pytest.raises(InfrastructureError, match=r"topic nowhere-\w+\.run\.events not found"):
        Runfacts.connect(kafka=rf.kafka, prefix=f"nowhere-{uuid.uuid4().hex[:6]}")
    noargs = Runfacts.connect(kafka=rf.kafka, prefix=rf.names.prefix, args_store=None)
    try:
        other = noargs.run("bad-2")
        with pytest.raises(ConfigError, match="args_store"):
            other.propose(REFUND, {"orderId": "o"}, target="o")
    finally:
        noargs.close()


def test_outbox_on_postgres_commits_the_services_rows_and_the_runs_commands_together(
        stack: AgentStack, postgres_dsn: str, unique: str) -> None:
    import psycopg

    table, notes = f"cl_outbox_{unique}", f"cl_notes_{unique}"
    svc = Runfacts.connect(kafka=stack.options.kafka, prefix=stack.names.prefix, outbox=postgres_dsn,
                           outbox_table=table)
    try:
        run = svc.start_run(goal="ticket:T-3001", summary="Call back", user_id="customer-42", run_id=f"pg-{unique}")
        created = run.version
        assert created is not None
        with pytest.raises(RuntimeError), svc.transaction() as conn:
            conn.execute(f"CREATE TABLE {notes} (ticket TEXT)")
            run.progress("never sent")
            raise RuntimeError("the service failed after queuing the command")
        with svc.transaction() as conn:
            conn.execute(f"CREATE TABLE {notes} (ticket TEXT)")
            conn.execute(f"INSERT INTO {notes} VALUES ('T-3001')")
            assert run.progress("call the customer") is None  # queued with the row, not awaited
        view = run.view(min_version=created + 1, timeout=60)
        assert view["progress"]["nextSafeAction"] == "call the customer"
        facts = read_run(stack.options.kafka, FollowerSettings(stack.names.events, stack.names.prefix), run.id)
        progress = [e.event.payload.nextSafeAction for e in facts  # type: ignore[attr-defined]
                    if e.event.eventType == "progress.updated"]
        assert progress == ["call the customer"]  # the rolled-back command never reached the log
        with psycopg.connect(postgres_dsn) as check:
            assert check.execute(f"SELECT ticket FROM {notes}").fetchall() == [("T-3001",)]
    finally:
        svc.close()
        with psycopg.connect(postgres_dsn, autocommit=True) as drop:
            for name in (notes, table, f"{table}_lease", f"{table}_parked"):
                drop.execute(f"DROP TABLE IF EXISTS {name}")


def test_debit_over_budget_raises_run_needs_review_and_views_show_each_role(rf: Runfacts) -> None:
    run = rf.start_run(goal="ticket:T-4001", summary="Chat", user_id="customer-42", budget={"tokens": 1000},
                       run_id="budget-T-4001")
    version = run.debit("model_step", tokens=600, costMicros=900)
    assert version is not None and version == (run.version or 0)
    with pytest.raises(RunNeedsReview) as review:
        run.debit("model_step_2", tokens=600)
    assert review.value.reason == "budget_exceeded"
    operator = rf.view(run.id, "operator", None, 30)
    assert operator["status"] == "needs_review" and operator["operator"]["budgetUsed"]["tokens"] == 600
    with pytest.raises(BadArgument, match="role"):
        run.view("janitor")


def test_a_command_on_an_ended_run_is_rejected_not_left_waiting(rf: Runfacts) -> None:
    run = rf.start_run(goal="ticket:T-5001", summary="Done", user_id="customer-42", run_id="ended-T-5001")
    run.complete()
    time.sleep(0.5)  # the follower lets the ended run go once nobody waits on it
    started = time.monotonic()
    with pytest.raises(CommandRejected) as late:
        run.progress("too late")
    assert late.value.reason == "run_ended" and time.monotonic() - started < 20


def test_an_unreadable_fact_fails_only_that_runs_wait_naming_the_record(stack: AgentStack, rf: Runfacts) -> None:
    from confluent_kafka import Producer

    from runfacts.client import ClientError
    from runfacts.partitioning import PRODUCER_PARTITIONING

    bad = rf.start_run(goal="ticket:T-6001", summary="x", user_id="customer-42", run_id="garbled-T-6001")
    good = rf.start_run(goal="ticket:T-6002", summary="x", user_id="customer-42", run_id="fine-T-6002")
    call = bad.propose(REFUND, {"orderId": "order-6001", "amountMinor": 100, "currency": "EUR"}, target="order-6001")
    producer = Producer({"bootstrap.servers": stack.options.kafka.bootstrap_servers, **PRODUCER_PARTITIONING})
    producer.produce(stack.names.events, b"\x00not an event", bad.id.encode())
    producer.flush(10)
    with pytest.raises(ClientError, match=rf"{stack.names.events}\[\d\]@\d+"):
        call.result(timeout=30)
    assert good.progress("still fine") is not None  # the follower carries on for every other run


def test_a_record_on_another_partition_than_its_run_never_reaches_the_runs_waits(
        stack: AgentStack, rf: Runfacts) -> None:
    """One writer per run (issue 33 item 6): the follower reads only a run's own partition of the
    events topic; a record keyed by the run on another partition (a misplaced copy) is skipped,
    so it neither answers nor breaks the run's waits."""
    from confluent_kafka import Producer

    from runfacts.partitioning import PRODUCER_PARTITIONING, partition_for

    run = rf.start_run(goal="ticket:T-6003", summary="x", user_id="customer-42", run_id="moved-T-6003")
    partitions = rf.follower.partitions
    elsewhere = (partition_for(run.id.encode(), partitions) + 1) % partitions
    producer = Producer({"bootstrap.servers": stack.options.kafka.bootstrap_servers, **PRODUCER_PARTITIONING})
    producer.produce(stack.names.events, b"\x00not an event", run.id.encode(), partition=elsewhere)
    assert producer.flush(10) == 0
    time.sleep(3)  # the follower has read past it (it follows every partition)
    assert run.progress("still fine") is not None  # was: ClientError naming the misplaced record
