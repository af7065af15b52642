"""Re-authorization (issue 33.8, SEMANTICS §13 and §6): after an expiry, proposing the same call
again (same toolCallId, same arguments) opens a new approval for the same arguments and the same
idempotency key; re-proposing a still-open request makes no second one; the expired approval
stays expired (a late approve is rejected) and each approval is consumed at most once."""

from __future__ import annotations

from datetime import timedelta

from decider_support import REFUND_KEY, Scenario, claim, create, propose_refund, resume, timer

CALL, APPROVAL = "tool-call-031", "approval-tool-call-031"


def expired() -> Scenario:
    """A refund whose approval expired before anyone decided (the run waits for re-authorization)."""
    s = Scenario().given(create(), propose_refund())
    s.given(timer("approval_expiry", APPROVAL, s.s.approvals[APPROVAL].expiresAt))
    assert (s.s.status, s.s.statusReason) == ("waiting_for_review", "approval_expired")
    return s


def test_propose_opens_a_new_approval_when_the_same_call_is_proposed_again_after_its_approval_expired() -> None:
    s = expired()

    s.when(propose_refund()).then("tool.call.proposed", "approval.required", "run.paused")

    again = s.event("tool.call.proposed").payload
    assert again.toolCallId == f"{CALL}-r1" and again.argsHash == s.s.toolCalls[CALL].argsHash
    assert s.s.toolCalls[f"{CALL}-r1"].idempotencyKey == s.s.toolCalls[CALL].idempotencyKey == REFUND_KEY
    assert s.s.approvals[f"approval-{CALL}-r1"].status == "open"
    assert s.s.approvals[APPROVAL].status == "expired" and s.s.status == "waiting_for_approval"


def test_propose_makes_no_second_request_when_the_reauthorization_is_still_open() -> None:
    s = expired().given(propose_refund())

    payload = s.when(propose_refund()).rejected("already_proposed")

    assert f"as {CALL}-r1 (proposed)" in payload.detail
    assert [a for a in s.s.approvals.values() if a.status == "open"] == [s.s.approvals[f"approval-{CALL}-r1"]]


def test_late_approve_of_the_expired_approval_stays_rejected_and_the_new_one_is_consumed_once() -> None:
    s = expired().given(propose_refund())

    s.when(resume(approval=APPROVAL)).rejected("approval_expired")
    s.when(resume(approval=f"approval-{CALL}-r1")).then("approval.granted", "tool.call.authorized", "run.resumed")
    s.when(claim(f"{CALL}-r1")).then("tool.call.dispatching", "approval.consumed", "budget.debited")
    s.when(resume(approval=f"approval-{CALL}-r1")).rejected("approval_already_decided")
    s.when(claim(CALL)).rejected("tool_call_closed")


def test_propose_asks_again_each_time_the_reauthorization_expires_until_the_loop_is_detected() -> None:
    s = expired().given(propose_refund())
    s.given(timer("approval_expiry", f"approval-{CALL}-r1", s.s.approvals[f"approval-{CALL}-r1"].expiresAt))

    s.when(propose_refund()).then("tool.call.proposed", "approval.required", "run.paused")
    assert s.event("tool.call.proposed").payload.toolCallId == f"{CALL}-r2"
    s.given(timer("approval_expiry", f"approval-{CALL}-r2", s.s.approvals[f"approval-{CALL}-r2"].expiresAt))
    s.when(propose_refund()).then("run.needs_review")  # the same action a 4th time: a person looks


def test_propose_opens_a_new_approval_when_the_grant_lapsed_before_dispatch() -> None:
    s = Scenario().given(create(), propose_refund(), resume())
    late = s.s.approvals[APPROVAL].expiresAt + timedelta(seconds=1)
    s.given(timer("approval_expiry", APPROVAL, late))
    assert s.s.toolCalls[CALL].closedReason == "approval_expired"

    s.when(propose_refund()).then("tool.call.proposed", "approval.required", "run.paused")
    assert s.event("approval.required").payload.approvalId == f"approval-{CALL}-r1"


def test_propose_is_already_proposed_when_the_call_was_rejected_not_expired() -> None:
    s = Scenario().given(create(), propose_refund(), resume(decision="reject"))
    s.when(propose_refund()).rejected("already_proposed")
    s.when(propose_refund(args_hash_="0" * 64)).rejected("tool_call_exists")
