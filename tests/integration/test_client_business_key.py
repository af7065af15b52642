"""A business idempotency key on the real broker: two runs propose the same refund under one
key, both are approved, the provider executes it once and both agents get the one refund."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from client_support import AgentStack, agent_stack, approval_of

from runfacts.client import CommandRejected

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def stack(kafka_bootstrap: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[AgentStack]:
    with agent_stack(kafka_bootstrap, tmp_path_factory.mktemp("bizkey"), approval_ttl_ms=120_000) as running:
        yield running




def test_two_runs_with_one_business_key_refund_once_and_a_second_call_in_a_run_is_refused(
        stack: AgentStack, unique: str) -> None:
    rf = stack.client()
    order, key = f"order-{unique}", f"ticket:T-{unique}"
    args = {"orderId": order, "amountMinor": 2500, "currency": "EUR"}
    try:
        runs = [rf.start_run(goal=key, summary="Refund", user_id="customer-42", tenant="acme",
                             run_id=f"bk-{n}-{unique}") for n in (1, 2)]
        calls = [run.propose("payments.refund", args, target=order, business_key=key) for run in runs]
        with pytest.raises(CommandRejected) as dup:
            runs[0].propose("payments.refund", {**args, "amountMinor": 2400}, target=order, business_key=key)
        assert dup.value.reason == "duplicate_business_key" and calls[0].id in str(dup.value)
        values = []
        for run, call in zip(runs, calls, strict=True):
            rf.decide(approval_of(rf, run.id), "approve", approver="alice", timeout=90)
            values.append(call.result(timeout=120))
        [refund] = [r for r in stack.ledger() if r["orderId"] == order]
        assert values[0]["refundId"] == values[1]["refundId"] == refund["refundId"]
        assert {rf.state(r.id).toolCalls[c.id].idempotencyKey for r, c in zip(runs, calls, strict=True)} == {
            f"bk:acme:{key}"}
    finally:
        rf.close()
