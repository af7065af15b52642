"""runfacts.client's pure checks: which facts end a wait, with which value or typed error,
and the version a command committed — over real decider output (given commands -> events)."""

from __future__ import annotations

from datetime import timedelta

import pytest
from decider_support import (
    RUN,
    Scenario,
    approved_refund,
    claim,
    command,
    completed,
    create,
    dispatched_refund,
    failed,
    propose_refund,
    reconciled,
    resume,
    tick,
    timer,
    unknown,
)

from runfacts.client import errors, outcomes
from runfacts.client.approvals import approvals_of, resume_for, resume_payload
from runfacts.client.outcomes import Entry
from runfacts.schemas import commands as cmd

CALL = "tool-call-031"


def entries(s: Scenario) -> list[Entry]:
    return [Entry(i, e) for i, e in enumerate(s.log)]


def result(s: Scenario) -> outcomes.Resolved | None:
    return outcomes.call_result(RUN, entries(s), CALL)


def test_result_waits_while_the_call_is_authorized_dispatched_or_unknown() -> None:
    assert result(approved_refund()) is None
    assert result(dispatched_refund()) is None
    assert result(dispatched_refund().given(unknown())) is None
    assert result(dispatched_refund().given(unknown(), reconciled("still_unknown"))) is None


def test_result_is_the_value_when_completed_and_when_reconciliation_found_it_completed() -> None:
    direct = result(dispatched_refund().given(completed()))
    found = result(dispatched_refund().given(unknown(), reconciled("found_completed", resultRef="refund-1",
                                                                   resultHash="h1")))
    assert direct is not None and found is not None
    assert direct.error is None and found.error is None
    assert direct.value == found.value  # one function reads both (None until a tool sends a value)


def test_result_value_reads_the_json_result_field_of_a_completion_fact() -> None:
    class Payload:
        result = '{"refundId": "rf-1", "amountMinor": 4200}'

    assert outcomes.result_value(Payload()) == {"refundId": "rf-1", "amountMinor": 4200}
    assert outcomes.result_value(object()) is None


def test_result_raises_tool_failed_with_class_and_retryability() -> None:
    got = result(dispatched_refund().given(failed(retryable=False, error="declined")))
    assert got is not None and isinstance(got.error, errors.ToolFailed)
    assert (got.error.error_class, got.error.retryable, got.error.tool_call_id) == ("declined", False, CALL)
    with pytest.raises(errors.ToolFailed, match="declined"):
        got.unwrap()


def test_result_raises_approval_rejected_naming_the_approver() -> None:
    s = Scenario().given(create(), propose_refund(), resume("reject"))
    got = result(s)
    assert got is not None and isinstance(got.error, errors.ApprovalRejected) and got.error.approver == "alice"
    decided = outcomes.call_decision(RUN, entries(s), CALL)
    assert decided is not None and isinstance(decided.error, errors.ApprovalRejected)


def test_result_raises_approval_expired_when_the_expiry_timer_fired() -> None:
    s = Scenario().given(create(), propose_refund())
    expires = s.s.approvals[f"approval-{CALL}"].expiresAt
    s.given(timer("approval_expiry", f"approval-{CALL}", expires + timedelta(seconds=1)))
    got = result(s)
    assert got is not None and isinstance(got.error, errors.ApprovalExpired)


def test_result_raises_run_cancelled_when_the_run_is_cancelled_while_waiting_for_approval() -> None:
    from decider_support import USER

    s = Scenario().given(create(), propose_refund(), command(cmd.CancelRun, USER, reason="changed my mind"))
    got = result(s)
    assert got is not None and isinstance(got.error, errors.RunCancelled)


def test_decision_names_the_approver_or_says_policy() -> None:
    got = outcomes.call_decision(RUN, entries(approved_refund()), CALL)
    assert got is not None and got.value.approver == "alice" and not got.value.by_policy
    assert outcomes.call_decision(RUN, entries(Scenario().given(create(), propose_refund())), CALL) is None


def test_version_after_counts_events_but_rejections() -> None:
    s = approved_refund()
    log = entries(s)
    assert outcomes.version_after(log, log[-1].offset) == s.s.version
    s.when(claim(attempt=7))  # rejected: wrong_attempt
    log = entries(s)
    assert log[-1].event.eventType == "command.rejected"
    assert outcomes.version_after(log, log[-1].offset) == s.s.version


def test_command_error_is_command_rejected_with_the_reason_code() -> None:
    s = approved_refund().when(claim(attempt=7))
    error = outcomes.command_error(RUN, s.last)
    assert isinstance(error, errors.CommandRejected) and error.reason == "wrong_attempt"
    assert isinstance(error, errors.ClientError) and "tool.call.claim" in str(error)


def test_approvals_lists_open_ones_in_plain_words_for_the_role() -> None:
    s = Scenario().given(create(), propose_refund())
    found = approvals_of([s.s], "support_agent", None, tick())
    assert [(a.approval_id, a.asks, a.args_hash) for a in found] == [
        (f"approval-{CALL}", "refund on order-001 (high risk)", s.s.toolCalls[CALL].argsHash)]
    assert approvals_of([s.s], "operator", None, tick()) == []
    assert approvals_of([s.s], None, None, tick() + timedelta(days=1)) == []  # expired: not pending


def test_decide_binds_the_args_hash_and_refuses_an_unknown_decision() -> None:
    s = Scenario().given(create(), propose_refund())
    approval = approvals_of([s.s], None, None, tick())[0]
    actor, request = resume_for(approval, "approve", "alice", "dashboard")
    payload = resume_payload(request, None)
    assert (payload["argsHash"], request.args_hash, actor.roles) == (approval.args_hash, approval.args_hash,
                                                                     ("support_agent",))
    accepted = s.when(command(cmd.ResumeRun, actor, **payload))
    assert [e.eventType for e in accepted.last][:2] == ["approval.granted", "tool.call.authorized"]
    with pytest.raises(errors.BadArgument, match="decision='maybe'"):
        resume_for(approval, "maybe", "alice", "dashboard")



def test_timeline_rows_name_the_call_and_redact_personal_fields() -> None:
    from runfacts.client.timeline import timeline

    rows = timeline(entries(approved_refund()))
    assert [r.event_type for r in rows][:2] == ["run.created", "run.started"]
    created = rows[0]
    assert "customer-42" not in created.detail and "[redacted]" in created.detail
    proposed = next(r for r in rows if r.event_type == "tool.call.proposed")
    assert proposed.subject == CALL and "action=refund" in proposed.detail
