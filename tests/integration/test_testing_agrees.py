"""runfacts.testing agrees with the real stack: the guide's story (a refund approved, paid and
completed; a refund rejected and the run failed), written once against the client API, run on
the broker-free test stack and on a real broker with the packaged workers (`runfacts worker
decider|dispatcher` subprocesses, the payment simulator), gives the same final statuses, the
same refund result and the same sequence of event types for each run."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from runfacts.client import ApprovalRejected
from runfacts.dev.provider.server import PaymentSimulator, SimSettings
from runfacts.testing import TestStack
from runfacts.tools.refund import refund_registry

pytestmark = pytest.mark.integration
API_KEY = "sk-agreement-not-a-secret"
RUNS = ("refund-T-9001", "refund-T-9002")
APPROVED = ["run.created", "run.started", "reasoning.recorded", "tool.call.proposed", "approval.required",
            "run.paused", "approval.granted", "tool.call.authorized", "run.resumed", "tool.call.dispatching",
            "approval.consumed", "budget.debited", "tool.call.completed", "verification.updated",
            "verification.updated", "run.completed", "checkpoint.saved", "checkpoint.archived"]
# the refund's verification: pending, then settled in the completion's decision (the tool answered the dispatcher)
REJECTED = ["run.created", "run.started", "tool.call.proposed", "approval.required", "run.paused",
            "approval.rejected", "run.resumed", "run.failed", "checkpoint.saved",
            "checkpoint.archived"]


def guide_story(rf: Any) -> list[str]:
    """docs/guide.md sections 2-5 as one function of the client; returns the run ids."""
    run = rf.start_run(goal="ticket:T-9001", summary="Refund the damaged kettle of order-001", user_id="customer-42",
                       budget={"toolCalls": 3, "steps": 20}, run_id="refund-T-9001")
    run.reason("refund order-001: damaged on arrival, within 30 days",
               evidence=["order:order-001", "policy:refunds-30-days", "ticket:T-9001"])
    call = run.propose("payments.refund", {"orderId": "order-001", "amountMinor": 4200, "currency": "EUR"},
                       target="order-001", summary="Refund 42.00 EUR for order-001")
    [approval] = [a for a in rf.approvals(role="support_agent") if a.run_id == run.id]
    rf.decide(approval, "approve", approver="alice")
    refund = call.result(timeout=120)  # a dict, or the declared type of a registry the client knows (a Refund)
    refund = refund if isinstance(refund, dict) else refund.model_dump()
    assert refund["orderId"] == "order-001" and refund["amountMinor"] == 4200
    run.complete(outcome="refund:order-001")

    second = rf.start_run(goal="ticket:T-9002", summary="Refund order-002", user_id="customer-42",
                          run_id="refund-T-9002")
    risky = second.propose("payments.refund", {"orderId": "order-002", "amountMinor": 99900, "currency": "EUR"},
                           target="order-002")
    [pending] = [a for a in rf.approvals(role="support_agent") if a.run_id == second.id]
    rf.decide(pending, "reject", approver="alice")
    with pytest.raises(ApprovalRejected):
        risky.result(timeout=60)
    second.fail("refund_rejected")
    return [run.id, second.id]


def ended(rf: Any, run_ids: list[str]) -> dict[str, tuple[str, list[str]]]:
    """{run id: (status, event types)} as the client reads them back."""
    return {rid: (rf.state(rid).status, [e.event_type for e in rf.run(rid).journal.entries]) for rid in run_ids}


@pytest.fixture
def simulator() -> Iterator[PaymentSimulator]:
    sim = PaymentSimulator(SimSettings(api_key=API_KEY))
    sim.start()
    try:
        yield sim
    finally:
        sim.stop()


@pytest.fixture(params=["testing", "kafka"])
def stack(request: pytest.FixtureRequest, tmp_path: Path,
          monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[Any, Callable[[], None]]]:
    """The agent's client and how to let the stack's time pass (the provider's refund settles
    after the run completed: the dispatcher's verification poll records it): on the test stack
    (the packaged refund tool against an in-process payment simulator; its clock is moved) or
    on a real broker with the packaged workers (until the runs' facts stop changing)."""
    if request.param == "testing":
        monkeypatch.setenv("RUNFACTS_PAYMENT_API_KEY", API_KEY)
        sim = request.getfixturevalue("simulator")
        with TestStack(refund_registry(), options={"provider_url": sim.url}) as test_stack:
            yield test_stack.client(), lambda: test_stack.advance(timedelta(seconds=60)) and None
        return
    from client_support import agent_stack

    with agent_stack(request.getfixturevalue("kafka_bootstrap"), tmp_path / "stack", approval_ttl_ms=600_000) as real:
        client = real.client()

        def quiet() -> None:
            seen, still, deadline = -1, 0.0, time.monotonic() + 60
            while still < 3 and time.monotonic() < deadline:
                count = len(real.ledger()) + sum(len(r.journal.entries) for r in map(client.run, RUNS))
                still = still + 0.5 if count == seen else 0.0
                seen = count
                time.sleep(0.5)

        try:
            yield client, quiet
        finally:
            client.close()


def test_the_guides_story_ends_the_same_on_the_test_stack_and_on_the_real_stack(
        stack: tuple[Any, Callable[[], None]]) -> None:
    rf, let_time_pass = stack
    runs = guide_story(rf)
    let_time_pass()
    found = ended(rf, runs)
    assert {run: status for run, (status, _types) in found.items()} == {"refund-T-9001": "completed",
                                                                        "refund-T-9002": "failed"}
    assert found["refund-T-9001"][1] == APPROVED
    assert found["refund-T-9002"][1] == REJECTED
