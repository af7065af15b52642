"""Tool-call track, budgets, loops, cancellation and terminal states of the run decider."""

from __future__ import annotations

from datetime import timedelta

from decider_support import (  # noqa: I001
    OPERATOR,
    REFUND_KEY,
    USER,
    Scenario,
    approved_refund,
    claim,
    command,
    completed,
    create,
    dispatched_refund,
    failed,
    propose_lookup,
    propose_refund,
    reconciled,
    report,
    resume,
    timer,
    unknown,
)

from runfacts.processors.decider.timers import wanted_timers
from runfacts.schemas import commands as cmd
from runfacts.schemas.common import BudgetAmounts

# --- execution track ------------------------------------------------------------------------


def test_claim_rejected_when_call_is_not_yet_authorized() -> None:
    Scenario().given(create(), propose_refund()).when(claim()).rejected("not_claimable")


def test_claim_rejected_when_idempotency_key_differs() -> None:
    approved_refund().when(claim(key="refund:order-001:other")).rejected("idempotency_key_mismatch")


def test_completion_sets_verification_pending_when_tool_reports_done() -> None:
    s = dispatched_refund().when(completed()).then("tool.call.completed", "verification.updated")
    call = s.s.toolCalls["tool-call-031"]
    assert (call.execution, call.verification) == ("completed", "pending")


def test_completion_settles_verification_in_the_same_decision_when_the_report_knows_it() -> None:
    s = dispatched_refund().when(completed(verification="confirmed_success"))
    s.then("tool.call.completed", "verification.updated", "verification.updated")  # pending -> settled
    pending, settled = (e.payload for e in s.last if e.eventType == "verification.updated")
    assert (pending.status, settled.status, settled.evidenceRef) == ("pending", "confirmed_success", "refund-1")
    call = s.s.toolCalls["tool-call-031"]
    assert (call.execution, call.verification) == ("completed", "confirmed_success")
    done = s.when(command(cmd.CompleteRun, outcomeRef="out-1"))
    assert done.event("run.completed").payload.pendingVerifications == ()  # nothing left to verify


def test_completion_reported_with_verification_pending_only_records_pending() -> None:
    s = dispatched_refund().when(completed(verification="pending"))
    s.then("tool.call.completed", "verification.updated")
    assert s.s.toolCalls["tool-call-031"].verification == "pending"


def test_duplicate_completion_rejected_when_callback_repeats() -> None:
    s = dispatched_refund().given(completed())
    s.when(completed()).rejected("duplicate_report")


def test_lost_response_goes_to_result_unknown_and_asks_reconciliation_when_reported() -> None:
    s = dispatched_refund().when(unknown())
    s.then("tool.call.result_unknown", "tool.call.reconciliation_requested")
    call = s.s.toolCalls["tool-call-031"]
    assert (call.execution, call.idempotencyKey) == ("result_unknown", REFUND_KEY)
    assert wanted_timers(s.s)["reconcile:tool-call-031"].kind == "reconciliation_deadline"


def test_result_unknown_only_leaves_by_reconciliation_when_reports_arrive() -> None:
    s = dispatched_refund().given(unknown())
    s.when(completed()).rejected("reconciliation_required")
    s.when(command(cmd.RetryToolCall, OPERATOR, toolCallId="tool-call-031")).rejected(
        "result_unknown_needs_reconciliation")
    s.when(claim(attempt=2, epoch=2)).rejected("not_claimable")
    assert s.s.toolCalls["tool-call-031"].execution == "result_unknown"


def test_reconciliation_found_completes_call_when_provider_has_it() -> None:
    s = dispatched_refund().given(unknown()).when(reconciled("found_completed"))
    s.then("tool.call.reconciled", "verification.updated")
    call = s.s.toolCalls["tool-call-031"]
    assert (call.execution, call.verification) == ("completed", "pending")


def test_reconciliation_found_failed_fails_call_when_provider_refused() -> None:
    s = dispatched_refund().given(unknown()).when(reconciled("found_failed"))
    assert s.s.toolCalls["tool-call-031"].execution == "failed"


def test_not_found_allows_redispatch_with_same_key_when_reconciled() -> None:
    s = dispatched_refund().given(unknown(), reconciled("not_found"))
    s.when(claim(attempt=2, epoch=1)).rejected("stale_lease")
    s.when(claim(attempt=2, epoch=2, key="refund:order-001:fresh")).rejected("idempotency_key_mismatch")
    s.when(claim(attempt=2, epoch=2)).then("tool.call.dispatching", "budget.debited")
    assert s.s.toolCalls["tool-call-031"].attempts == 2


def test_still_unknown_past_deadline_needs_review_when_reconciled() -> None:
    s = dispatched_refund().given(unknown())
    deadline = s.s.toolCalls["tool-call-031"].reconcileDeadline
    s.when(reconciled("still_unknown", at=deadline + timedelta(seconds=1)))
    s.then("tool.call.reconciled", "run.needs_review")
    assert (s.s.status, s.s.statusReason) == ("needs_review", "unresolved_side_effect")


def test_deadline_timer_moves_run_to_review_when_call_stays_unknown() -> None:
    s = dispatched_refund().given(unknown())
    deadline = s.s.toolCalls["tool-call-031"].reconcileDeadline
    s.when(timer("reconciliation_deadline", "tool-call-031", deadline)).then("run.needs_review")


def test_stale_report_rejected_when_attempt_is_old() -> None:
    s = dispatched_refund().given(failed(), command(cmd.RetryToolCall, OPERATOR, toolCallId="tool-call-031"),
                                  claim(attempt=2, epoch=2))
    s.when(completed(attempt=1)).rejected("stale_report")


def test_retry_reauthorizes_when_failure_is_retryable() -> None:
    s = dispatched_refund().given(failed(retryable=True))
    s.when(command(cmd.RetryToolCall, OPERATOR, toolCallId="tool-call-031")).then("tool.call.retry_requested")
    assert s.s.toolCalls["tool-call-031"].execution == "authorized"


def test_retry_rejected_when_failure_is_not_retryable() -> None:
    s = dispatched_refund().given(failed(retryable=False, error="permission"))
    s.when(command(cmd.RetryToolCall, OPERATOR, toolCallId="tool-call-031")).rejected("not_retryable")


def test_retry_rejected_when_max_attempts_are_used() -> None:
    retry = lambda: command(cmd.RetryToolCall, OPERATOR, toolCallId="tool-call-031")  # noqa: E731
    s = dispatched_refund().given(failed(), retry(), claim(attempt=2, epoch=2), failed(attempt=2), retry(),
                                  claim(attempt=3, epoch=3), failed(attempt=3))
    s.when(retry()).rejected("max_attempts")


def test_run_completes_with_verification_pending_when_work_was_handed_off() -> None:
    s = dispatched_refund().given(completed()).when(command(cmd.CompleteRun, outcomeRef="out-1"))
    s.then("run.completed", "checkpoint.saved", "checkpoint.archived")
    assert s.event("run.completed").payload.pendingVerifications == ("tool-call-031",)
    s.when(report_verification("confirmed_success")).then("verification.updated")
    assert s.s.toolCalls["tool-call-031"].verification == "confirmed_success"


def report_verification(status: str) -> cmd.ReportVerification:
    return command(cmd.ReportVerification, toolCallId="tool-call-031", status=status)


def test_complete_rejected_when_a_call_is_in_flight() -> None:
    dispatched_refund().when(command(cmd.CompleteRun)).rejected("tool_calls_in_flight")


# --- budgets and loops ----------------------------------------------------------------------


def test_debit_that_would_overdraw_moves_run_to_review_when_budget_runs_out() -> None:
    s = Scenario().given(create(BudgetAmounts(tokens=1000)),
                         command(cmd.DebitBudget, amounts=BudgetAmounts(tokens=900), actionHash="a1"))
    s.when(command(cmd.DebitBudget, amounts=BudgetAmounts(tokens=200), actionHash="a2"))
    s.then("budget.exceeded", "run.needs_review")
    assert s.s.budget.used.tokens == 900
    assert s.s.status == "needs_review"


def test_claim_moves_run_to_review_instead_of_dispatching_when_tool_call_budget_is_spent() -> None:
    s = Scenario().given(create(BudgetAmounts(toolCalls=1)), propose_lookup(),
                         claim("tool-call-010", key=_lookup_key()))
    s.given(report(cmd.ReportToolCompleted, "tool-call-010", resultRef="r", resultHash="h"),
            propose_lookup("tool-call-011"))
    s.when(claim("tool-call-011", key=s.s.toolCalls["tool-call-011"].idempotencyKey))
    s.then("budget.exceeded", "run.needs_review")
    assert s.s.toolCalls["tool-call-011"].execution == "authorized"
    assert s.s.budget.used.toolCalls == 1


def _lookup_key() -> str:
    return Scenario().given(create(), propose_lookup()).s.toolCalls["tool-call-010"].idempotencyKey


def test_repeated_action_moves_run_to_review_with_path_when_loop_threshold_reached() -> None:
    s = Scenario().given(create(), propose_lookup("c1"), propose_lookup("c2"), propose_lookup("c3"))
    s.when(propose_lookup("c4")).then("run.needs_review")
    review = s.event("run.needs_review").payload
    assert review.reason == "loop_detected" and len(review.attemptedPath) == 3


def test_wall_time_timer_moves_run_to_review_when_wall_budget_is_spent() -> None:
    s = Scenario().given(create(BudgetAmounts(wallTimeMs=60_000)))
    due = wanted_timers(s.s)["wall"].due
    s.when(timer("wall_budget", s.s.runId, due)).then("budget.exceeded", "run.needs_review")


# --- cancellation and terminal states ----------------------------------------------------


def test_cancel_waits_for_in_flight_call_then_cancels_when_it_settles() -> None:
    s = dispatched_refund().given(propose_refund("tool-call-040", args_hash_="2" * 64))
    s.when(command(cmd.CancelRun, USER, reason="customer withdrew"))
    s.then("approval.invalidated", "run.cancel_requested")
    assert s.s.status == "cancelling"
    s.when(claim("tool-call-040", key=s.s.toolCalls["tool-call-040"].idempotencyKey)).rejected("tool_call_closed")
    s.when(completed()).then("tool.call.completed", "verification.updated", "run.cancelled",
                                 "checkpoint.saved", "checkpoint.archived")
    assert s.s.status == "cancelled"


def test_cancel_lists_unresolved_calls_when_reconciliation_finds_nothing() -> None:
    s = dispatched_refund().given(unknown(), command(cmd.CancelRun, USER, reason="stop"))
    s.when(reconciled("not_found")).then("tool.call.reconciled", "run.cancelled", "checkpoint.saved",
                                         "checkpoint.archived")


def test_stop_closes_open_approvals_and_records_final_checkpoint_when_nothing_is_in_flight() -> None:
    s = Scenario().given(create(), propose_refund()).when(command(cmd.StopRun, USER, reason=""))
    s.then("approval.invalidated", "run.cancel_requested", "run.cancelled", "checkpoint.saved", "checkpoint.archived")
    assert s.event("checkpoint.saved").payload.node == "final"


def test_fail_closes_open_approvals_when_run_fails() -> None:
    s = Scenario().given(create(), propose_refund())
    s.when(command(cmd.FailRun, errorClass="model_error", detail="")).then(
        "approval.invalidated", "run.failed", "checkpoint.saved", "checkpoint.archived")


def test_terminal_state_is_final_when_commands_arrive_after_completion() -> None:
    s = Scenario().given(create(), command(cmd.CompleteRun))
    s.when(propose_refund()).rejected("run_not_active")
    s.when(command(cmd.FailRun, errorClass="x", detail="")).rejected("run_ended")
    s.when(resume()).rejected("run_ended")
    s.when(command(cmd.RecordFeedback, USER, feedbackId="fb-1", rating=5)).then("feedback.recorded")
    s.when(command(cmd.ArchiveRun)).then("run.archived")
    s.when(command(cmd.RecordFeedback, USER, feedbackId="fb-2", rating=5)).rejected("run_archived")


def test_archive_rejected_when_run_is_still_active() -> None:
    Scenario().given(create()).when(command(cmd.ArchiveRun)).rejected("run_not_ended")


def test_late_approval_cannot_revive_when_run_is_cancelling() -> None:
    s = dispatched_refund().given(propose_refund("tool-call-050", args_hash_="3" * 64),
                                  command(cmd.CancelRun, USER, reason=""))
    s.when(resume(approval="approval-tool-call-050", args_hash_="3" * 64)).rejected("run_cancelled")


def test_resume_then_claim_succeeds_when_everything_is_in_order() -> None:
    s = Scenario().given(create(), propose_refund(), resume())
    s.when(claim()).then("tool.call.dispatching", "approval.consumed", "budget.debited")
