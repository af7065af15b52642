"""The run decider with the real policy and signed approvals plugged in (given/when/then)."""

from __future__ import annotations

import pytest
from decider_support import (
    OPERATOR,
    REFUND_HASH,
    RUN,
    SUPPORT,
    USER,
    Scenario,
    claim,
    command,
    completed,
    create,
    policy_ctx,
    propose_refund,
    resume,
)

from runfacts.processors.decider.security import to_millis
from runfacts.processors.policy.approvals import ApprovalClaims, Keyring, SigningKey, issue_token
from runfacts.schemas import commands as cmd
from runfacts.schemas.common import Actor

KEYRING = Keyring(keys={"k1": SigningKey(b"k" * 32)}, current="k1")
SECURED = policy_ctx(KEYRING)
APPROVAL = "approval-tool-call-031"


def token(decision: str = "approve", subject: str = SUPPORT.subjectId, args: str = REFUND_HASH,
          ttl_ms: int = 3_600_000, ring: Keyring = KEYRING) -> str:
    claims = ApprovalClaims(run_id=RUN, approval_id=APPROVAL, args_hash=args, decision=decision,
                            subject_id=subject, expires_at_ms=to_millis(resume().issuedAt) + ttl_ms)
    return issue_token(ring, "k1", claims)


def waiting() -> Scenario:
    return Scenario(SECURED).given(create(), propose_refund())


def test_default_policy_admits_the_decider_test_actors_when_run_goes_end_to_end():
    unsigned = policy_ctx()
    s = Scenario(unsigned).given(create(), propose_refund(), resume(), claim(), completed())
    s.given(command(cmd.CompleteRun, outcomeRef="out-1"), command(cmd.ArchiveRun))
    assert s.s.archived


def test_policy_checks_record_policy_version_when_plugged_into_context():
    assert SECURED.policy_version == "2026-12-06.2"


def test_resume_grants_approval_when_token_signs_this_decision():
    waiting().when(resume(approvalToken=token())).then("approval.granted", "tool.call.authorized", "run.resumed")


@pytest.mark.parametrize(("kwargs", "reason"), [
    ({}, "token_missing"),
    ({"approvalToken": token(decision="reject")}, "token_claims_mismatch"),
    ({"approvalToken": token(subject="mallory")}, "token_claims_mismatch"),
    ({"approvalToken": token(ttl_ms=-1)}, "token_expired"),
    ({"approvalToken": token(ring=Keyring(keys={"k1": SigningKey(b"x" * 32)}))}, "token_bad_signature"),
])
def test_resume_rejected_when_token_is_missing_or_does_not_sign_this_decision(kwargs, reason):
    waiting().when(resume(**kwargs)).rejected(reason)


def test_resume_rejected_as_forbidden_role_when_role_is_claimed_through_harness_source():
    forged = Actor(subjectId="alice", roles=("support_agent",), authSource="agent-harness")
    waiting().when(resume(actor=forged, approvalToken=token())).rejected("forbidden_role")


def test_command_rejected_as_untrusted_source_when_source_is_not_in_policy():
    outsider = USER.model_copy(update={"authSource": "intranet-script"})
    waiting().when(command(cmd.StopRun, outsider, reason="x")).rejected("untrusted_source")


def test_retry_rejected_as_forbidden_role_when_sender_is_not_operator():
    waiting().when(command(cmd.RetryToolCall, SUPPORT, toolCallId="tool-call-031")).rejected("forbidden_role")
    by_operator = waiting().when(command(cmd.RetryToolCall, OPERATOR, toolCallId="tool-call-031"))
    assert [e.eventType for e in by_operator.last] == ["command.rejected"]
    assert by_operator.last[0].payload.reasonCode != "forbidden_role"  # past the policy, stopped by state


def test_claim_rejected_as_forbidden_role_when_human_sends_runtime_command():
    human_claim = claim().model_copy(update={"actor": OPERATOR})
    waiting().when(human_claim).rejected("forbidden_role")
