"""The dashboard's approve action and who asked (issue 33.1): the ResumeRun the approve button
builds for the run's own user is refused by the decider (`self_approval_forbidden`) under the
packaged policy, while another support agent's goes through; the run page lists the requesters
to an auditor only."""

from __future__ import annotations

from datetime import UTC, datetime

from decider_support import AGENT, Scenario, command, create, policy_ctx, propose_refund

from runfacts.dashboard.app import _resume
from runfacts.dashboard.runpage import run_page
from runfacts.dashboard.session import Session
from runfacts.ops.views import Viewer
from runfacts.processors.policy.access import allowed_command_types, load_policy
from runfacts.schemas import commands as cmd
from runfacts.security.identity import Identity

APPROVAL = "approval-tool-call-031"


def waiting_for(user_id: str) -> Scenario:
    """A refund waiting for a support agent's approval in `user_id`'s run, created by the harness."""
    base = create().payload
    return Scenario(policy_ctx()).given(
        command(cmd.CreateRun, AGENT, goalRef="goal-1", goalSummary="refund order-001", userId=user_id,
                budget=base.budget, versions=base.versions, at=datetime.now(UTC)),
        propose_refund(at=datetime.now(UTC)))


def approve_button(s: Scenario, subject: str) -> cmd.ResumeRun:
    """The command the dashboard's approve button sends for a logged-in support agent."""
    session = Session(Identity(subject, ("support_agent",)), "csrf", 0)
    return _resume(s.s, session, {"decision": "approve", "approval_id": APPROVAL})  # type: ignore[return-value]


def test_dashboard_approve_is_refused_as_self_approval_when_the_runs_user_approves_their_own_refund() -> None:
    s = waiting_for("alice")

    s.when(approve_button(s, "alice")).rejected("self_approval_forbidden")

    assert s.s.approvals[APPROVAL].status == "open"
    s.when(approve_button(s, "bob")).then("approval.granted", "tool.call.authorized", "run.resumed")


def test_run_page_names_the_requesters_to_an_auditor_only() -> None:
    s = waiting_for("customer-7")
    policy = load_policy()

    def row(role: str):  # noqa: ANN202
        actor = Identity("x", (role,)).actor("dashboard")
        page = run_page(s.s, [], Viewer("x", (role,), allowed_command_types(policy, actor), None, True))
        return next(a for a in page.approvals if a.approval_id == APPROVAL)

    assert row("auditor").requested_by == "customer-7"
    assert "customer-7" not in row("support_agent").requested_by
