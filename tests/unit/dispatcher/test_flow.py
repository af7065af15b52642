"""The dispatcher with the run decider through test drivers: dispatch, retries, arguments."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from decider_support import OPERATOR, REFUND_ARGS, REFUND_HASH, policy_ctx

from runfacts.schemas import commands as cmd

from .dispatcher_support import CALL, POOLED, Loop

CLAIMED = ["tool.call.dispatching", "approval.consumed", "budget.debited"]


@pytest.fixture(autouse=True, params=[False, True], ids=["in-transaction", "pooled"])
def pooled(request: pytest.FixtureRequest) -> Iterator[bool]:
    """Every test twice: tool calls inside the engine transaction, and off it (ToolPool)."""
    POOLED["on"] = request.param
    yield request.param
    POOLED["on"] = False


@pytest.fixture
def loop(tmp_path: Path) -> Iterator[Loop]:
    loop = Loop(tmp_path)
    yield loop
    loop.close()


def _ledger_keys(loop: Loop) -> list[str]:
    return [r.idempotency_key for r in loop.sim.ledger()]


def test_refund_completes_once_when_the_provider_answers(loop: Loop) -> None:
    loop.start_refund()
    # the provider said "succeeded": the verification is settled with the completion, pending first
    assert loop.types()[-6:] == [*CLAIMED, "tool.call.completed", "verification.updated", "verification.updated"]
    claim = loop.commands()[0]
    call = loop.call()
    assert claim.payload.externalRequestId == f"{CALL}-a1" and claim.payload.leaseEpoch == 1_000_001
    assert claim.actor.authSource == "dispatcher" and claim.causationId is not None
    assert _ledger_keys(loop) == [call.idempotencyKey]
    assert (call.execution, call.verification) == ("completed", "confirmed_success")
    loop.advance(5_000)  # nobody polls the provider for what it already said
    assert not [c for c in loop.commands() if c.commandType == "tool.call.report_verification"]
    assert [c.payload.verification for c in loop.commands() if c.commandType == "tool.call.report_completed"] == [
        "confirmed_success"]


def test_verification_confirms_success_when_the_provider_settles_a_pending_refund(loop: Loop) -> None:
    loop.sim.set_faults(pending=True)
    loop.start_refund().advance(500).advance(500)
    assert loop.call().verification == "pending"
    loop.sim.settle(loop.sim.ledger()[0].refund_id, "succeeded")
    loop.advance(1_000)
    assert loop.call().verification == "confirmed_success"
    assert [c.payload.status for c in loop.commands() if c.commandType.endswith("verification")] == [
        "confirmed_success"]


def test_verification_is_confirmed_failure_when_the_refund_fails_to_settle(loop: Loop) -> None:
    loop.sim.set_faults(pending=True)
    loop.start_refund()
    loop.sim.settle(loop.sim.ledger()[0].refund_id, "failed")
    loop.advance(500)
    assert loop.call().verification == "confirmed_failure"


def test_verification_is_inconclusive_when_the_refund_stays_pending_past_the_deadline(loop: Loop) -> None:
    loop.sim.set_faults(pending=True)
    loop.start_refund()
    for _ in range(12):
        loop.advance(1_000)
    assert loop.call().verification == "inconclusive"


def test_call_is_retried_with_the_same_key_when_the_provider_rate_limits(loop: Loop) -> None:
    loop.sim.set_faults(rateLimitNext=1, retryAfterS=1)
    loop.start_refund()
    assert loop.call().execution == "dispatching" and len(loop.adapter.executed) == 1
    loop.advance(999)
    assert len(loop.adapter.executed) == 1  # Retry-After is a floor on the backoff
    loop.advance(5_000)
    first, second = loop.adapter.executed
    assert (first.idempotency_key, first.external_request_id) == (
        second.idempotency_key, second.external_request_id)
    assert loop.call().execution == "completed" and len(loop.sim.ledger()) == 1


def test_call_is_retried_when_the_provider_answers_503(loop: Loop) -> None:
    loop.sim.set_faults(errorNext=2, errorStatus=503)
    loop.start_refund().advance(10_000).advance(10_000)
    assert len(loop.adapter.executed) == 3
    assert loop.call().execution == "completed" and len(loop.sim.ledger()) == 1


def test_call_fails_retryable_and_an_operator_retry_reuses_the_key_when_attempts_run_out(loop: Loop) -> None:
    loop.sim.set_faults(errorNext=3)
    loop.start_refund().advance(10_000).advance(10_000)
    call = loop.call()
    assert (call.execution, call.errorClass, call.retryable) == ("failed", "transient", True)
    assert len(loop.adapter.executed) == 3 and loop.sim.ledger() == []
    loop.send(loop.at(cmd.RetryToolCall, OPERATOR, toolCallId=CALL))
    call = loop.call()
    assert (call.execution, call.attempts, call.externalRequestId) == ("completed", 2, f"{CALL}-a2")
    assert _ledger_keys(loop) == [call.idempotencyKey]


def test_call_fails_without_retry_when_the_arguments_are_invalid(loop: Loop) -> None:
    loop.start_refund(arguments={**REFUND_ARGS, "currency": "eur"})
    call = loop.call()
    assert (call.execution, call.errorClass, call.retryable) == ("failed", "validation", False)
    assert len(loop.adapter.executed) == 1 and loop.sim.ledger() == []


def test_call_fails_without_retry_when_the_provider_refuses_the_api_key(tmp_path: Path) -> None:
    loop = Loop(tmp_path, api_key="wrong-key")
    try:
        loop.start_refund().advance(10_000)
        call = loop.call()
        assert (call.execution, call.errorClass, call.retryable) == ("failed", "permission", False)
        assert len(loop.adapter.executed) == 1
    finally:
        loop.close()


def test_call_fails_as_refused_when_the_provider_declines_the_refund(tmp_path: Path) -> None:
    loop = Loop(tmp_path, max_amount_minor=1_000)
    try:
        loop.start_refund()
        call = loop.call()
        assert (call.execution, call.errorClass, call.retryable) == ("failed", "refused", False)
        assert loop.sim.ledger() == []
    finally:
        loop.close()


def test_call_fails_as_args_tampered_when_the_stored_arguments_change(loop: Loop) -> None:
    loop.start_refund(approve=False)
    loop.args.conn.execute("UPDATE runfacts_args SET body = ? WHERE args_ref = ?",
                           ('{"amountMinor":990000,"currency":"EUR","orderId":"order-001"}', f"args/{CALL}"))
    loop.approve(REFUND_HASH)
    call = loop.call()
    assert (call.execution, call.errorClass, call.retryable) == ("failed", "args_tampered", False)
    assert loop.adapter.executed == [] and loop.sim.ledger() == []


def test_call_fails_as_args_missing_when_the_arguments_were_never_stored(loop: Loop) -> None:
    loop.start_refund(approve=False)
    loop.args.conn.execute("DELETE FROM runfacts_args")
    loop.approve(REFUND_HASH)
    assert (loop.call().execution, loop.call().errorClass) == ("failed", "args_missing")
    assert loop.adapter.executed == []


def test_tool_is_called_once_when_the_transaction_is_aborted_and_replayed(loop: Loop) -> None:
    loop.start_refund(approve=False)
    loop.dispatcher.abort_next_commit(2)
    loop.approve(REFUND_HASH)
    assert len(loop.adapter.executed) == 1
    assert loop.call().execution == "completed"
    assert [c.commandType for c in loop.commands()].count("tool.call.report_completed") == 1


def test_dispatcher_commands_pass_the_packaged_access_policy_when_the_decider_enforces_it(tmp_path: Path) -> None:
    loop = Loop(tmp_path, ctx=policy_ctx())
    try:
        loop.start_refund()
        assert loop.rejections() == [] and loop.call().execution == "completed"
        loop.advance(500)
        assert loop.call().verification == "confirmed_success"
    finally:
        loop.close()


def test_rate_limits_back_off_without_spending_the_calls_attempts(loop: Loop) -> None:
    loop.sim.set_faults(rateLimitNext=5, retryAfterS=1)  # five 429s: more than the policy's 3 attempts
    loop.start_refund()
    for _ in range(5):
        loop.advance(1_000)  # each Retry-After of 1 s, honoured exactly
    call = loop.call()
    assert (call.execution, call.attempts) == ("completed", 1) and len(loop.adapter.executed) == 6
    assert len(loop.sim.ledger()) == 1 and "tool.call.failed" not in loop.types()
    assert {r.external_request_id for r in loop.adapter.executed} == {call.externalRequestId}
