"""One given/when/then test per rule of the run decider (docs/decider.md, SEMANTICS.md)."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta

from decider_support import (  # noqa: I001
    CTX,
    OPERATOR,
    REFUND_HASH,
    REFUND_KEY,
    USER,
    VERSIONS,
    Scenario,
    approved_refund,
    claim,
    command,
    create,
    propose_lookup,
    propose_refund,
    resume,
    timer,
)

from runfacts.processors.decider.timers import wanted_timers
from runfacts.schemas import commands as cmd
from runfacts.schemas.common import Actor

# --- versions, dedupe, identity -----------------------------------------------------------


def test_resume_rejected_with_expected_and_actual_when_expected_version_is_stale() -> None:
    s = Scenario().given(create(), propose_refund())
    payload = s.when(resume(expected=2)).rejected("stale_version")
    assert (payload.expectedVersion, payload.actualVersion) == (2, s.s.version)


def test_command_has_no_second_effect_when_command_id_repeats() -> None:
    s = Scenario().given(create(), propose_refund())
    first = resume(command_id="cmd-approve-1")
    s.when(first).then("approval.granted", "tool.call.authorized", "run.resumed")
    version = s.s.version
    assert s.when(first).last == []
    assert s.s.version == version


def test_rejection_leaves_version_unchanged_when_command_is_rejected() -> None:
    s = Scenario().given(create())
    version = s.s.version
    s.when(resume(approval="approval-nope")).rejected("unknown_approval")
    assert s.s.version == version


def test_create_rejected_when_run_exists() -> None:
    Scenario().given(create()).when(create()).rejected("run_exists")


def test_command_rejected_when_run_is_unknown() -> None:
    Scenario().when(propose_refund()).rejected("unknown_run")


def test_command_rejected_when_actor_has_no_auth_source() -> None:
    nobody = Actor(subjectId="x", roles=(), authSource="")
    Scenario().given(create()).when(command(cmd.StopRun, nobody, reason="")).rejected("missing_actor")


def test_same_commands_give_same_event_ids_when_replayed() -> None:
    commands = [create(), propose_refund(), resume()]
    a, b = Scenario().given(*commands), Scenario().given(*commands)
    assert [e.eventId for e in a.log] == [e.eventId for e in b.log]
    assert len({e.eventId for e in a.log}) == len(a.log)


def test_version_counts_events_when_events_apply() -> None:
    s = Scenario().given(create(), propose_refund())
    assert s.s.version == len(s.log)


# --- approvals ----------------------------------------------------------------------------


def test_propose_asks_for_approval_when_capability_is_high_risk() -> None:
    s = Scenario().given(create()).when(propose_refund())
    s.then("tool.call.proposed", "approval.required", "run.paused")
    required = s.event("approval.required").payload
    assert (required.risk, required.requiredRole, required.argsHash) == ("high", "support_agent", REFUND_HASH)
    assert s.s.status == "waiting_for_approval"
    assert s.s.toolCalls["tool-call-031"].idempotencyKey == REFUND_KEY


def test_propose_authorizes_without_approval_when_policy_allows() -> None:
    s = Scenario().given(create()).when(propose_lookup())
    s.then("tool.call.proposed", "tool.call.authorized")
    assert s.s.toolCalls["tool-call-010"].execution == "authorized"


def test_resume_grants_exactly_once_when_approval_is_open() -> None:
    s = Scenario().given(create(), propose_refund())
    s.when(resume()).then("approval.granted", "tool.call.authorized", "run.resumed")
    s.when(resume()).rejected("approval_already_decided")
    s.when(resume(decision="reject")).rejected("approval_already_decided")


def test_resume_reject_closes_the_call_when_approver_refuses() -> None:
    s = Scenario().given(create(), propose_refund())
    s.when(resume(decision="reject")).then("approval.rejected", "run.resumed")
    assert s.s.toolCalls["tool-call-031"].closedReason == "approval_rejected"
    s.when(claim()).rejected("tool_call_closed")


def test_resume_rejected_when_approval_has_expired_by_time() -> None:
    s = Scenario().given(create(), propose_refund())
    late = s.s.approvals["approval-tool-call-031"].expiresAt + timedelta(seconds=1)
    s.when(resume(at=late)).rejected("approval_expired")


def test_expiry_timer_pauses_run_for_reauthorization_when_approval_expires() -> None:
    s = Scenario().given(create(), propose_refund())
    due = s.s.approvals["approval-tool-call-031"].expiresAt
    s.when(timer("approval_expiry", "approval-tool-call-031", due)).then("approval.expired", "run.paused")
    assert (s.s.status, s.s.statusReason) == ("waiting_for_review", "approval_expired")
    s.when(resume(at=due + timedelta(seconds=5))).rejected("approval_expired")
    s.when(propose_refund("tool-call-032")).then("tool.call.proposed", "approval.required", "run.paused")
    assert s.s.status == "waiting_for_approval"


def test_expiry_timer_is_a_no_op_when_approved_call_was_already_claimed() -> None:
    s = approved_refund().given(claim())
    due = s.s.approvals["approval-tool-call-031"].expiresAt
    assert s.when(timer("approval_expiry", "approval-tool-call-031", due)).last == []
    assert "expiry:approval-tool-call-031" not in wanted_timers(s.s)


def test_expiry_timer_is_a_no_op_when_approval_was_rejected() -> None:
    s = Scenario().given(create(), propose_refund(), resume(decision="reject"))
    due = s.s.approvals["approval-tool-call-031"].expiresAt
    assert s.when(timer("approval_expiry", "approval-tool-call-031", due)).last == []


def test_resume_rejected_when_run_was_cancelled() -> None:
    s = Scenario().given(create(), propose_refund(), command(cmd.CancelRun, USER, reason="changed mind"))
    assert s.s.status == "cancelled"
    s.when(resume()).rejected("run_cancelled")


def test_resume_rejected_when_arguments_changed_since_approval_was_asked() -> None:
    s = Scenario().given(create(), propose_refund())
    s.when(resume(args_hash_="0" * 64)).rejected("args_changed")


def test_reproposal_creates_no_second_approval_when_approval_is_still_open() -> None:
    s = Scenario().given(create(), propose_refund())
    s.when(propose_refund()).rejected("already_proposed")
    assert list(s.s.approvals) == ["approval-tool-call-031"]


def test_new_arguments_invalidate_open_approval_when_call_is_reproposed() -> None:
    s = Scenario().given(create(), propose_refund())
    s.when(propose_refund("tool-call-032", args_hash_="1" * 64))
    s.then("approval.invalidated", "tool.call.proposed", "approval.required", "run.paused")
    assert s.s.approvals["approval-tool-call-031"].status == "invalidated"
    assert s.s.toolCalls["tool-call-032"].idempotencyKey != REFUND_KEY
    s.when(resume()).rejected("approval_invalidated")


def test_resume_rejected_when_approver_lacks_required_role() -> None:
    s = Scenario().given(create(), propose_refund())
    s.when(resume(actor=OPERATOR)).rejected("forbidden_role")


def test_resume_rejected_when_requester_approves_own_high_risk_call() -> None:
    requester = Actor(subjectId=USER.subjectId, roles=("support_agent",), authSource="dashboard")
    s = Scenario().given(create(), propose_refund())
    s.when(resume(actor=requester)).rejected("self_approval_forbidden")


def test_approval_is_consumed_once_when_call_is_claimed() -> None:
    s = approved_refund().when(claim())
    s.then("tool.call.dispatching", "approval.consumed", "budget.debited")
    assert s.s.approvals["approval-tool-call-031"].status == "consumed"
    s.when(claim(attempt=2, epoch=2)).rejected("not_claimable")


def test_resume_rejected_until_migrated_when_runtime_versions_changed() -> None:
    s = Scenario().given(create(), propose_refund())
    newer = VERSIONS.model_copy(update={"toolManifest": "tm-2"})
    s.ctx = replace(CTX, current_versions=newer)
    s.when(resume()).rejected("incompatible_versions")
    s.when(command(cmd.MigrateRun, OPERATOR, versions=newer)).then("run.migrated", "checkpoint.saved")
    s.when(resume()).then("approval.granted", "tool.call.authorized", "run.resumed")
