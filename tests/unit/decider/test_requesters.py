"""Who asked (issue 33.1, SEMANTICS §13): an approval stands for the run's user, its creator when
a person and never a service identity; without self-approval none of them may decide it, under
the default checks and the packaged policy alike. A property test over random capabilities,
actors and requesters: the decider never authorizes a call whose approver is a requester."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest
from decider_support import AGENT, CTX, OPERATOR, USER, Scenario, command, create, policy_ctx, propose_refund, resume
from hypothesis import given, settings
from hypothesis import strategies as st

from runfacts.processors.decider import decide
from runfacts.processors.decider.context import DecideContext
from runfacts.processors.decider.security import policy_checks
from runfacts.processors.decider.state_json import load_state
from runfacts.processors.policy.access import SERVICE_SOURCES, load_policy, requesters
from runfacts.processors.policy.capabilities import parse_capabilities
from runfacts.schemas import commands as cmd
from runfacts.schemas.common import Actor

APPROVAL = "approval-tool-call-031"
GOLDEN = Path(__file__).parents[2] / "contract" / "golden-state" / "run-state"


def support(subject: str) -> Actor:
    """A support agent through the dashboard (the role the refund's approval needs)."""
    return Actor(subjectId=subject, roles=("support_agent", "user"), authSource="dashboard")


def run_for(user_id: str, creator: Actor = AGENT, ctx: DecideContext = CTX) -> Scenario:
    """A refund waiting for approval in a run of `user_id` created by `creator`."""
    return Scenario(ctx).given(command(cmd.CreateRun, creator, goalRef="goal-1", goalSummary="refund order-001",
                                       userId=user_id, budget=create().payload.budget,
                                       versions=create().payload.versions),
                               propose_refund())


def resume_as(actor: Actor) -> cmd.ResumeRun:
    return resume(actor=actor)


@pytest.mark.parametrize("ctx", [CTX, policy_ctx()], ids=["default", "policy"])
def test_resume_rejected_self_approval_when_the_runs_user_approves_a_run_the_harness_created(
        ctx: DecideContext) -> None:
    s = run_for("customer-7", AGENT, ctx)

    payload = s.when(resume_as(support("customer-7"))).rejected("self_approval_forbidden")

    assert "customer-7 is a requester" in payload.detail
    assert s.s.approvals[APPROVAL].status == "open"
    assert s.s.toolCalls["tool-call-031"].execution == "proposed"


@pytest.mark.parametrize("ctx", [CTX, policy_ctx()], ids=["default", "policy"])
def test_resume_rejected_self_approval_when_the_person_who_created_the_run_approves(ctx: DecideContext) -> None:
    creator = Actor(subjectId="sam", roles=("support_agent",), authSource="dashboard")
    s = run_for("customer-7", creator, ctx)

    s.when(resume_as(support("sam"))).rejected("self_approval_forbidden")
    s.when(resume_as(support("alice"))).then("approval.granted", "tool.call.authorized", "run.resumed")


def test_approval_stands_for_the_user_and_a_person_creator_never_a_service_identity() -> None:
    assert run_for("customer-7", AGENT).s.approvals[APPROVAL].requesters == ("customer-7",)
    assert run_for("customer-7", OPERATOR).s.approvals[APPROVAL].requesters == ("customer-7", "olga")
    assert run_for("user-7", USER).s.approvals[APPROVAL].requesters == ("user-7",)  # once


@pytest.mark.parametrize("source", sorted(SERVICE_SOURCES))
def test_requesters_leave_out_every_service_source_and_count_any_other_source_as_a_person(source: str) -> None:
    service = Actor(subjectId="svc", roles=("agent",), authSource=source)
    person = Actor(subjectId="pat", roles=("user",), authSource="outbox:support-desk")
    assert requesters("customer-7", service, None, person) == ("customer-7", "pat")


def test_resume_accepted_when_self_approval_is_allowed_for_the_capability() -> None:
    ctx = DecideContext(capabilities=parse_capabilities(_lenient_manifest()), current_versions=CTX.current_versions)
    s = run_for("customer-7", AGENT, ctx)
    s.when(resume_as(support("customer-7"))).then("approval.granted", "tool.call.authorized", "run.resumed")


def _lenient_manifest() -> str:
    return """
[[capability]]
capabilityId = "payments.refund"
risk = "high"
requiredRole = "support_agent"
needsApproval = true
selfApproval = true
reconciliationDeadlineMs = 600000
approvalTtlMs = 900000
[capability.retry]
maxAttempts = 3
baseBackoffMs = 200
maxBackoffMs = 5000
deadlineMs = 30000
"""


@pytest.mark.parametrize("path", sorted(GOLDEN.glob("v[123]-*.json")), ids=lambda p: p.name)
def test_stored_approval_gets_its_requesters_when_a_state_before_format_4_is_read(path: Path) -> None:
    raw = path.read_bytes().strip()
    before = json.loads(raw)["approvals"]["approval-tool-call-031"]

    approval = load_state(raw).approvals["approval-tool-call-031"]

    assert before["requestedBy"] == "user-7"  # the creator, as it was attributed
    assert approval.requesters == ("customer-42", "user-7")  # the run's user first, the person creator


# --- the property: no requester ever authorizes a call without self-approval -----------------

SUBJECTS = st.sampled_from(["customer-7", "sam", "alice", "agent-harness", "olga"])
SOURCES = st.sampled_from(["dashboard", "cli", "agent-harness", "outbox:support-desk", "dispatcher"])
ROLES = st.sampled_from(["support_agent", "supervisor", "operator", "user"])


@st.composite
def actors(draw: st.DrawFn) -> Actor:
    return Actor(subjectId=draw(SUBJECTS), roles=tuple(draw(st.lists(ROLES, max_size=3, unique=True))),
                 authSource=draw(SOURCES))


def _manifest(role: str, risk: str, self_approval: bool) -> str:
    return f"""
[[capability]]
capabilityId = "payments.refund"
risk = "{risk}"
requiredRole = "{role}"
needsApproval = true
selfApproval = {str(self_approval).lower()}
reconciliationDeadlineMs = 600000
approvalTtlMs = 900000
[capability.retry]
maxAttempts = 3
baseBackoffMs = 200
maxBackoffMs = 5000
deadlineMs = 30000
"""


@settings(max_examples=150, deadline=None)
@given(role=ROLES, risk=st.sampled_from(["low", "medium", "high"]), use_policy=st.booleans(),
       user=SUBJECTS, creator=actors(), approver=actors())
def test_decider_never_authorizes_a_call_whose_approver_is_a_requester_without_self_approval(
        role: str, risk: str, use_policy: bool, user: str, creator: Actor, approver: Actor) -> None:
    catalog = parse_capabilities(_manifest(role, risk, self_approval=False))
    base = DecideContext(capabilities=catalog, current_versions=CTX.current_versions)
    ctx = base
    if use_policy:
        ctx = replace(base, **policy_checks(load_policy(catalog=catalog)))
        creator = creator.model_copy(update={"roles": ("user", "support_agent", "operator", "agent")})
    s = Scenario(ctx)
    s.when(command(cmd.CreateRun, creator, goalRef="g", goalSummary="s", userId=user,
                   budget=create().payload.budget, versions=create().payload.versions))
    if s.state is None:  # the policy refused the creator: nothing to approve
        return
    s.when(propose_refund())
    if APPROVAL not in s.s.approvals:
        return
    asked = s.s.approvals[APPROVAL].requesters
    assert user in asked
    if creator.subjectId != user:
        assert (creator.subjectId in asked) == (creator.authSource not in SERVICE_SOURCES)

    events = decide(resume_as(approver), s.s, ctx)

    authorized = any(e.eventType == "tool.call.authorized" for e in events)
    if approver.subjectId in asked:
        assert not authorized, (approver, asked, [e.eventType for e in events])
        assert ctx.check_approver(catalog.get("payments.refund"), approver, asked) is not None


def test_resume_rejected_self_approval_when_the_person_who_proposed_the_call_approves() -> None:
    """The proposer counts when a person (SEMANTICS §13): a support agent who proposes a refund
    (e.g. re-authorizing it from the console) cannot approve it; another support agent can."""
    proposer = support("sam")
    s = Scenario(CTX).given(create())
    s.given(command(cmd.ProposeToolCall, proposer, toolCallId="tool-call-031", capabilityId="payments.refund",
                    argsHash=propose_refund().payload.argsHash, argsRef="args/tool-call-031", target="order-001",
                    action="refund", risk="high", summary="Refund 42.00 EUR for order-001"))

    assert "sam" in s.s.approvals[APPROVAL].requesters
    s.when(resume_as(support("sam"))).rejected("self_approval_forbidden")
    s.when(resume_as(support("alice"))).then("approval.granted", "tool.call.authorized", "run.resumed")


def test_a_service_proposer_is_no_requester() -> None:
    assert run_for("customer-7", AGENT).s.approvals[APPROVAL].requesters == ("customer-7",)
