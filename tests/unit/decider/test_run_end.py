"""Run-end hygiene as facts: approvals closed, grants revoked, checkpoints archived (SEMANTICS §10)."""

from __future__ import annotations

from decider_support import (
    DISPATCHER,
    Scenario,
    approved_refund,
    claim,
    command,
    create,
    dispatched_refund,
    failed,
    propose_lookup,
    propose_refund,
)

from runfacts.schemas import commands as cmd


def _complete() -> cmd.CompleteRun:
    return command(cmd.CompleteRun, outcomeRef="outcome-1")


def _fail() -> cmd.FailRun:
    return command(cmd.FailRun, errorClass="model_error", detail="")


def test_complete_revokes_a_granted_approval_when_its_call_was_never_claimed() -> None:
    s = approved_refund().when(_complete())
    s.then("run.completed", "checkpoint.saved", "grant.revoked", "checkpoint.archived")
    revoked = s.event("grant.revoked").payload
    assert (revoked.grantKind, revoked.approvalId, revoked.reason) == (
        "approval", "approval-tool-call-031", "run_completed")
    assert s.s.approvals["approval-tool-call-031"].status == "revoked"
    call = s.s.toolCalls["tool-call-031"]
    assert (call.revoked, call.closedReason) == (True, "grant_revoked")


def test_claim_rejected_grant_revoked_when_the_run_completed_before_the_claim() -> None:
    approved_refund().given(_complete()).when(claim()).rejected("grant_revoked")


def test_complete_revokes_an_authorization_when_a_low_risk_call_was_not_claimed() -> None:
    s = Scenario().given(create(), propose_lookup()).when(_complete())
    revoked = s.event("grant.revoked").payload
    assert (revoked.grantKind, revoked.toolCallId, revoked.approvalId) == ("authorization", "tool-call-010", None)


def test_fail_revokes_the_dispatch_lease_when_a_call_is_in_flight() -> None:
    s = dispatched_refund().when(_fail())
    s.then("run.failed", "checkpoint.saved", "grant.revoked", "checkpoint.archived")
    revoked = s.event("grant.revoked").payload
    assert (revoked.grantKind, revoked.reason) == ("lease", "run_failed")
    call = s.s.toolCalls["tool-call-031"]
    assert (call.revoked, call.execution, call.closedReason) == (True, "dispatching", None)


def test_report_accepted_when_the_lease_was_revoked_because_the_outcome_is_still_a_fact() -> None:
    s = dispatched_refund().given(_fail())
    s.when(failed(retryable=False, error="grant_revoked")).then("tool.call.failed")


def test_redispatch_rejected_grant_revoked_when_the_run_failed_while_the_call_was_unknown() -> None:
    s = dispatched_refund().given(command(cmd.ReportResultUnknown, DISPATCHER, toolCallId="tool-call-031",
                                          attempt=1, externalRequestId="payment-request-tool-call-031-1",
                                          lastError="timeout"), _fail())
    s.when(claim(attempt=2, epoch=2)).rejected("grant_revoked")


def test_cancel_invalidates_open_approvals_and_archives_checkpoints_when_nothing_is_in_flight() -> None:
    s = Scenario().given(create(), propose_refund())
    s.when(command(cmd.CancelRun, reason="user withdrew"))
    s.then("approval.invalidated", "run.cancel_requested", "run.cancelled", "checkpoint.saved",
           "checkpoint.archived")
    assert s.s.approvals["approval-tool-call-031"].status == "invalidated"
    assert s.event("checkpoint.archived").payload.reason == "run_cancelled"


def test_checkpoint_archive_names_the_final_checkpoint_when_the_run_completes() -> None:
    s = Scenario().given(create()).when(_complete())
    saved, archived = s.event("checkpoint.saved").payload, s.event("checkpoint.archived").payload
    assert (archived.node, archived.stateHash) == ("final", saved.stateHash)
    assert s.s.checkpointsArchived


def test_archive_emits_no_second_revocation_or_archive_when_the_end_already_cleaned_up() -> None:
    s = approved_refund().given(_complete()).when(command(cmd.ArchiveRun, checkpointRef=None))
    s.then("run.archived")

