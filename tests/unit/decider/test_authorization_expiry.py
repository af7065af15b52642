"""A granted approval authorizes a dispatch attempt only until it expires (SEMANTICS.md §6).

Issue 15 item 2: a grant that expired while the dispatcher was down must pause the run for
re-authorization at the first claim and at a re-dispatch after `not_found`, never execute.
"""

from __future__ import annotations

from datetime import timedelta

from decider_support import (  # noqa: I001
    OPERATOR,
    Scenario,
    approved_refund,
    claim,
    command,
    dispatched_refund,
    failed,
    propose_refund,
    reconciled,
    timer,
    unknown,
)

from runfacts.processors.decider.timers import wanted_timers
from runfacts.schemas import commands as cmd

APPROVAL = "approval-tool-call-031"


def _expiry(s: Scenario) -> object:
    return s.s.approvals[APPROVAL].expiresAt


def _paused_for_reauthorization(s: Scenario) -> None:
    assert (s.s.status, s.s.statusReason) == ("waiting_for_review", "approval_expired")
    assert s.s.approvals[APPROVAL].status == "expired"
    assert s.s.toolCalls["tool-call-031"].closedReason == "approval_expired"


def test_claim_pauses_run_for_reauthorization_when_grant_expired_before_first_claim() -> None:
    s = approved_refund()
    late = _expiry(s) + timedelta(seconds=19)  # type: ignore[operator]
    s.when(claim(at=late)).then("approval.expired", "run.paused")
    _paused_for_reauthorization(s)
    assert s.s.toolCalls["tool-call-031"].execution == "authorized"  # never dispatching
    s.when(claim(at=late + timedelta(seconds=1), epoch=2)).rejected("tool_call_closed")


def test_claim_dispatches_when_grant_is_still_valid() -> None:
    s = approved_refund()
    s.when(claim(at=_expiry(s) - timedelta(seconds=1)))  # type: ignore[operator]
    s.then("tool.call.dispatching", "approval.consumed", "budget.debited")


def test_expiry_timer_pauses_run_when_granted_call_was_never_claimed() -> None:
    s = approved_refund()
    spec = wanted_timers(s.s)[f"expiry:{APPROVAL}"]
    assert (spec.kind, spec.due) == ("approval_expiry", _expiry(s))
    s.when(timer("approval_expiry", APPROVAL, spec.due)).then("approval.expired", "run.paused")
    _paused_for_reauthorization(s)
    assert f"expiry:{APPROVAL}" not in wanted_timers(s.s)


def test_reconciled_not_found_pauses_run_when_grant_expired_during_recovery() -> None:
    s = dispatched_refund().given(unknown())
    late = _expiry(s) + timedelta(seconds=5)  # type: ignore[operator]
    s.when(reconciled("not_found", at=late)).then("tool.call.reconciled", "approval.expired", "run.paused")
    _paused_for_reauthorization(s)
    call = s.s.toolCalls["tool-call-031"]
    assert (call.execution, call.reconciliation, call.in_flight) == ("result_unknown", "not_found", False)
    s.when(claim(attempt=2, epoch=2, at=late + timedelta(seconds=1))).rejected("tool_call_closed")


def test_redispatch_claim_pauses_run_when_consumed_grant_expired_after_not_found() -> None:
    s = dispatched_refund().given(unknown(), reconciled("not_found"))
    assert f"expiry:{APPROVAL}" in wanted_timers(s.s)  # awaiting the re-dispatch claim
    late = _expiry(s) + timedelta(seconds=1)  # type: ignore[operator]
    s.when(claim(attempt=2, epoch=2, at=late)).then("approval.expired", "run.paused")
    _paused_for_reauthorization(s)
    assert s.s.toolCalls["tool-call-031"].attempts == 1


def test_redispatch_claim_dispatches_attempt_two_when_grant_is_still_valid() -> None:
    s = dispatched_refund().given(unknown(), reconciled("not_found"))
    s.when(claim(attempt=2, epoch=2)).then("tool.call.dispatching", "budget.debited")


def test_retry_rejected_when_grant_expired_after_a_retryable_failure() -> None:
    s = dispatched_refund().given(failed())
    late = _expiry(s) + timedelta(seconds=1)  # type: ignore[operator]
    retry = command(cmd.RetryToolCall, OPERATOR, at=late, toolCallId="tool-call-031")
    assert "expired" in s.when(retry).rejected("approval_expired").detail


def test_reauthorization_proposes_same_arguments_under_a_new_approval_when_grant_lapsed() -> None:
    s = approved_refund()
    late = _expiry(s) + timedelta(seconds=1)  # type: ignore[operator]
    s.given(claim(at=late))
    s.when(propose_refund("tool-call-032", at=late + timedelta(seconds=1)))
    s.then("tool.call.proposed", "approval.required", "run.paused")
    new = s.s.toolCalls["tool-call-032"]
    assert (new.argsHash, new.idempotencyKey) == (s.s.toolCalls["tool-call-031"].argsHash,
                                                  s.s.toolCalls["tool-call-031"].idempotencyKey)
    assert s.s.approvals["approval-tool-call-032"].status == "open"
