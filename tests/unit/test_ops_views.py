"""Operator summary, runs-list filters and the dashboard's role-trimmed user view (pure)."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest
from decider_support import Scenario, claim, create, failed, propose_refund, resume

from runfacts.run_views import RunFilter, Viewer, list_rows, operator_summary, parse_duration, user_view
from runfacts.schemas.common import Actor

PERSONAL = ("refund order-001", "customer-42", "user-7", "Refund 42.00 EUR", "alice", "dispatcher-1")


def _waiting() -> Scenario:
    return Scenario().given(create(), propose_refund())


def test_operator_summary_carries_no_personal_field_when_run_has_every_kind():
    s = Scenario().given(create(), propose_refund(), resume(), claim(), failed(retryable=True))
    now = s.s.statusSince + timedelta(minutes=5)

    text = json.dumps(operator_summary(s.s, now))

    for value in PERSONAL:
        assert value not in text
    summary = json.loads(text)
    assert summary["toolCalls"][0]["execution"] == "failed"
    assert summary["toolCalls"][0]["errorClass"] == "rate_limited"
    assert summary["errors"] == ["tool-call-031: rate_limited"]
    assert summary["budget"]["toolCalls"] == {"used": 1, "limit": 5}


def test_operator_summary_shows_pending_approval_and_stuck_time_when_waiting():
    s = _waiting()
    now = s.s.statusSince + timedelta(minutes=12)

    summary = operator_summary(s.s, now)

    assert summary["status"] == "waiting_for_approval"
    assert summary["stuckSeconds"] == 720.0
    assert [(a["approvalId"], a["requiredRole"]) for a in summary["pendingApprovals"]] == [
        ("approval-tool-call-031", "support_agent")]


def test_runs_list_keeps_only_matching_runs_when_filtered():
    waiting, running = _waiting().s, Scenario().given(create(run="run-2")).s
    later = max(waiting.statusSince, running.statusSince) + timedelta(minutes=20)
    ancient = running.model_copy(update={"statusSince": later - timedelta(hours=3), "runId": "run-3"})
    states = [waiting, running, ancient]

    by_status = list_rows(states, RunFilter(status="waiting_for_approval"), later)
    stuck = list_rows(states, RunFilter(stuck_longer_than=timedelta(hours=1)), later)
    review = list_rows(states, RunFilter(needs_review=True), later)

    assert [r["runId"] for r in by_status] == [waiting.runId]
    assert [r["runId"] for r in stuck] == ["run-3"]
    assert review == []
    assert [r["runId"] for r in list_rows(states, RunFilter(), later)][0] == "run-3"


@pytest.mark.parametrize(("text", "seconds"), [("90s", 90), ("10m", 600), ("2h", 7200), ("1d", 86400), ("45", 45)])
def test_parse_duration_reads_units_when_given(text: str, seconds: float):
    assert parse_duration(text).total_seconds() == seconds


def test_parse_duration_names_the_input_when_unit_is_unknown():
    with pytest.raises(ValueError, match="'10 weeks'"):
        parse_duration("10 weeks")


def test_user_view_shows_decidable_banner_when_viewer_holds_required_role():
    view = user_view(_waiting().s, Viewer("alice", ("support_agent",)))

    assert view is not None
    banner = view["approvalBanner"]
    assert banner["approvalId"] == "approval-tool-call-031" and banner["canDecide"] is True
    assert banner["summary"] == "Refund 42.00 EUR for order-001"
    assert view["goalSummary"] == "refund order-001"


def test_user_view_hides_personal_fields_and_buttons_when_viewer_is_operator():
    view = user_view(_waiting().s, Viewer("olga", ("operator",)))

    assert view is not None
    assert view["goalSummary"] is None and view["approvalBanner"]["summary"] is None
    assert view["approvalBanner"]["canDecide"] is False
    assert view["canCancel"] is True
    for value in PERSONAL:
        assert value not in json.dumps(view)


def test_user_view_is_none_when_end_user_looks_at_someone_elses_run():
    state = _waiting().s

    assert user_view(state, Viewer("customer-99", ("user",))) is None
    own = user_view(state, Viewer("customer-42", ("user",)))
    assert own is not None and own["canStop"] is True and own["canRetry"] == []


def test_user_view_has_no_banner_when_approval_was_granted():
    s = _waiting().given(resume())

    view = user_view(s.s, Viewer("alice", ("support_agent",)))

    assert view is not None and view["approvalBanner"] is None and view["status"] == "running"


def test_user_view_buttons_follow_the_policy_when_viewer_carries_allowed_commands():
    from runfacts.processors.policy import allowed_command_types, load_policy

    s = Scenario().given(create(), propose_refund(), resume(), claim(), failed(retryable=True))
    policy = load_policy()
    operator = Actor(subjectId="olga", roles=("operator",), authSource="dashboard")
    user = Actor(subjectId="customer-42", roles=("user",), authSource="dashboard")

    as_operator = user_view(s.s, Viewer("olga", ("operator",), allowed_command_types(policy, operator)))
    as_user = user_view(s.s, Viewer("customer-42", ("user",), allowed_command_types(policy, user)))

    assert as_operator["canRetry"] == ["tool-call-031"] and as_operator["canStop"] is True
    assert as_user["canRetry"] == [] and as_user["canStop"] is True
