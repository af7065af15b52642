"""Operator summary, runs-list filters and the dashboard's role-trimmed user view (pure)."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest
from decider_support import Scenario, claim, create, failed, propose_refund, resume

from runfacts.ops.views import RunFilter, Viewer, list_rows, operator_summary, page_view, parse_duration, view_of
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


def _page(state, viewer: Viewer):
    return page_view(view_of(state, viewer.role), viewer)


def test_page_shows_decidable_banner_in_plain_words_when_viewer_holds_required_role():
    view = _page(_waiting().s, Viewer("alice", ("support_agent",)))

    assert view is not None and view["role"] == "user"
    banner = view["approvalBanner"]
    assert banner["approvalId"] == "approval-tool-call-031" and view["canDecide"] is True
    assert banner["asks"] == "refund on order-001 (high risk)" and banner["summary"] is None
    assert view["auditor"] is None and view["operator"] is None


def test_page_hides_personal_fields_and_buttons_when_viewer_is_operator():
    view = _page(_waiting().s, Viewer("olga", ("operator",)))

    assert view is not None and view["role"] == "operator"
    assert view["approvalBanner"]["summary"] is None and view["canDecide"] is False
    assert view["canCancel"] is True and view["operator"]["openApprovals"] == 1
    for value in PERSONAL:
        assert value not in json.dumps(view)


def test_page_carries_personal_fields_only_when_viewer_is_auditor():
    view = _page(_waiting().s, Viewer("audrey", ("auditor",)))

    assert view is not None and view["auditor"]["goalSummary"] == "refund order-001"
    assert view["approvalBanner"]["summary"] == "Refund 42.00 EUR for order-001"


def test_viewer_sees_only_own_runs_when_end_user():
    state = _waiting().s

    assert not Viewer("customer-99", ("user",)).may_see(state.userId)
    assert Viewer("customer-42", ("user",)).may_see(state.userId)
    assert Viewer("olga", ("operator",)).may_see(state.userId)
    own = _page(state, Viewer("customer-42", ("user",)))
    assert own is not None and own["canStop"] is True and own["canRetry"] == []


def test_page_has_no_banner_when_approval_was_granted():
    s = _waiting().given(resume())

    view = _page(s.s, Viewer("alice", ("support_agent",)))

    assert view is not None and view["approvalBanner"] is None and view["status"] == "running"
    assert view["canDecide"] is False


def test_page_buttons_follow_the_policy_when_viewer_carries_allowed_commands():
    from runfacts.processors.policy.access import allowed_command_types, load_policy

    s = Scenario().given(create(), propose_refund(), resume(), claim(), failed(retryable=True))
    policy = load_policy()
    operator = Actor(subjectId="olga", roles=("operator",), authSource="dashboard")
    user = Actor(subjectId="customer-42", roles=("user",), authSource="dashboard")

    as_operator = _page(s.s, Viewer("olga", ("operator",), allowed_command_types(policy, operator)))
    as_user = _page(s.s, Viewer("customer-42", ("user",), allowed_command_types(policy, user)))

    assert as_operator["canRetry"] == ["tool-call-031"] and as_operator["canStop"] is True
    assert as_user["canRetry"] == [] and as_user["canStop"] is True


def test_page_view_of_the_published_record_equals_the_view_of_the_state_when_decoded():
    from runfacts.dashboard.feed import decode_view
    from runfacts.projections.user_view import publisher

    state = _waiting().s
    ((_topic, _key, value),) = publisher("v")(state)

    assert decode_view(value) == view_of(state, "user")


def test_runs_list_rows_carry_retries_orphans_and_checkpoint_lag():
    from decider_support import OPERATOR, command, propose_lookup

    from runfacts.schemas import commands as cmd

    orphan = Scenario().given(create(), propose_lookup()).s  # authorized, never claimed
    retried = Scenario().given(create(), propose_refund(), resume(), claim(), failed(retryable=True),
                               command(cmd.RetryToolCall, OPERATOR, toolCallId="tool-call-031"),
                               claim(attempt=2, epoch=2)).s.model_copy(update={"runId": "run-retried"})
    at = orphan.toolCalls["tool-call-010"].claimableSince
    assert at is not None

    soon = {r["runId"]: r for r in list_rows([orphan, retried], RunFilter(), at + timedelta(seconds=30))}
    later = {r["runId"]: r for r in list_rows([orphan, retried], RunFilter(), at + timedelta(minutes=5))}

    assert soon[orphan.runId]["orphanedCalls"] == []  # a dispatcher may still claim it
    assert later[orphan.runId]["orphanedCalls"] == ["tool-call-010"]
    assert later["run-retried"]["orphanedCalls"] == [] and later["run-retried"]["retries"] == 1
    assert later[orphan.runId]["retries"] == 0
    lag = (orphan.updatedAt - orphan.createdAt).total_seconds()  # no checkpoint: since it was created
    assert later[orphan.runId]["checkpointLagSeconds"] == round(lag, 1) and lag > 0
