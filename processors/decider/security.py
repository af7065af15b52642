"""The access policy and the approval keyring, plugged into the run decider's `DecideContext`.

    ctx = DecideContext(current_versions=..., **policy_checks(load_policy(), load_keyring()))

Pure (the policy and keyring are loaded by the shell). The token's `now` is the command's
`issuedAt`, the same instant the decider judges approval expiry by.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from functools import partial
from typing import Any, Protocol

from runfacts.processors.policy.access import Policy, check_approver, check_command, check_tenant, required_roles
from runfacts.processors.policy.approvals import ApprovalBinding, Keyring, verify_token
from runfacts.schemas import commands as cmd
from runfacts.schemas.commands import ResumeRun

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


class OpenApproval(Protocol):
    """What the token is checked against: the approval as the run's state holds it."""

    approvalId: str
    argsHash: str
    displayDigest: str | None


def to_millis(instant: datetime) -> int:
    """Milliseconds since the epoch of an aware datetime."""
    return (instant - EPOCH) // timedelta(milliseconds=1)


def approval_token_check(keyring: Keyring) -> Callable[[ResumeRun, OpenApproval], str | None]:
    """A `DecideContext.verify_token`: the resume's token must sign exactly this decision."""

    def check(command: ResumeRun, approval: OpenApproval) -> str | None:
        binding = ApprovalBinding(run_id=command.runId, approval_id=approval.approvalId,
                                  args_hash=approval.argsHash, decision=command.payload.decision,
                                  subject_id=command.actor.subjectId, display_digest=approval.displayDigest)
        return verify_token(keyring, command.payload.approvalToken, binding, to_millis(command.issuedAt))

    return check


class Candidate(Protocol):
    """What a review token is checked against: the memory candidate as the run's state holds it."""

    memoryId: str
    candidateHash: str


def review_token_check(keyring: Keyring) -> Callable[[cmd.ReviewMemory, Candidate], str | None]:
    """A `DecideContext.verify_review_token`: the approval token format, bound to the memory id
    (as approvalId) and the candidate's hash (as argsHash); memory ids cannot collide with
    approval ids (`memory-` prefix), so a token of one never passes for the other."""

    def check(command: cmd.ReviewMemory, memory: Candidate) -> str | None:
        binding = ApprovalBinding(run_id=command.runId, approval_id=memory.memoryId,
                                  args_hash=memory.candidateHash, decision=command.payload.decision,
                                  subject_id=command.actor.subjectId)
        return verify_token(keyring, command.payload.reviewToken, binding, to_millis(command.issuedAt))

    return check


def policy_checks(policy: Policy, keyring: Keyring | None = None) -> dict[str, Any]:
    """`DecideContext` keyword arguments enforcing `policy`, and signed approvals when a keyring is given."""
    return {
        "capabilities": policy.capabilities,
        "policy_version": policy.version,
        "check_command": partial(check_command, policy),
        "check_approver": partial(check_approver, policy),
        "check_tenant": partial(check_tenant, policy),
        "required_roles": partial(required_roles, policy),
        "verify_token": None if keyring is None else approval_token_check(keyring),
        "verify_review_token": None if keyring is None else review_token_check(keyring),
    }
