"""A proposal's business idempotency key: the key the tool is sent (tenant-scoped, the same in
every run), and the decider's in-run refusal of a second live call with that key."""

from __future__ import annotations

from decider_support import REFUND_KEY, Scenario, claim, create, failed, propose_refund, resume

from runfacts.processors.policy.retry import args_hash, business_idempotency_key

KEY = "ticket:T-9001"
OTHER_HASH = args_hash({"orderId": "order-001", "amountMinor": 100, "currency": "EUR"})


def test_the_call_is_sent_with_the_tenant_scoped_business_key_the_same_in_every_run() -> None:
    first = Scenario().given(create(tenant="acme"), propose_refund(businessKey=KEY))
    other = Scenario().given(create(tenant="acme", run="run-other"), propose_refund(businessKey=KEY, run="run-other"))
    elsewhere = Scenario().given(create(tenant="globex", run="run-g"), propose_refund(businessKey=KEY, run="run-g"))
    keys = [s.s.toolCalls["tool-call-031"].idempotencyKey for s in (first, other, elsewhere)]
    assert keys == ["bk:acme:ticket:T-9001", "bk:acme:ticket:T-9001", "bk:globex:ticket:T-9001"]
    assert first.log[-3].payload.businessKey == KEY  # tool.call.proposed carries it
    plain = Scenario().given(create(tenant="acme"), propose_refund())
    assert plain.s.toolCalls["tool-call-031"].idempotencyKey == REFUND_KEY  # no business key: per-run key


def test_the_dispatcher_claims_with_the_business_key_and_another_key_is_refused() -> None:
    s = Scenario().given(create(tenant="acme"), propose_refund(businessKey=KEY), resume())
    s.when(claim(key=business_idempotency_key("acme", KEY))).then("tool.call.dispatching", "approval.consumed",
                                                                 "budget.debited")
    s2 = Scenario().given(create(tenant="acme"), propose_refund(businessKey=KEY), resume())
    s2.when(claim(key=REFUND_KEY)).rejected("idempotency_key_mismatch")


def test_a_second_live_call_with_the_business_key_in_the_run_is_refused_naming_the_first() -> None:
    s = Scenario().given(create(tenant="acme"), propose_refund(businessKey=KEY))
    payload = s.when(propose_refund("tool-call-032", OTHER_HASH, businessKey=KEY)).rejected("duplicate_business_key")
    assert "tool-call-031" in payload.detail and KEY in payload.detail
    s.when(propose_refund("tool-call-033", OTHER_HASH, businessKey="ticket:T-9002")).then(
        "approval.invalidated", "tool.call.proposed", "approval.required", "run.paused")  # supersedes 031


def test_the_business_key_is_free_again_once_the_first_call_failed_or_never_ran() -> None:
    s = Scenario().given(create(tenant="acme"), propose_refund(businessKey=KEY), resume(),
                         claim(key=business_idempotency_key("acme", KEY)), failed(retryable=False))
    assert s.s.toolCalls["tool-call-031"].execution == "failed"
    s.when(propose_refund("tool-call-032", OTHER_HASH, businessKey=KEY)).then(
        "tool.call.proposed", "approval.required", "run.paused")
    rejected = Scenario().given(create(tenant="acme"), propose_refund(businessKey=KEY), resume("reject"))
    rejected.when(propose_refund("tool-call-032", OTHER_HASH, businessKey=KEY)).then(
        "tool.call.proposed", "approval.required", "run.paused")


def test_a_malformed_business_key_is_refused_as_an_invalid_tool_call() -> None:
    s = Scenario().given(create(tenant="acme"))
    payload = s.when(propose_refund(businessKey="ticket T 9001!")).rejected("invalid_tool_call")
    assert "businessKey" in payload.detail
