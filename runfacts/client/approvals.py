"""Approvals for UIs, pure: list the pending ones in plain words, build the signed decision.

An approval is listed with what it asks in plain words (the same `asks` the user view's
banner shows), its risk, required role, expiry, the argsHash it binds and the argument
display (`display`: each argument as the tool's schema names it, its value and unit; personal
fields masked unless the caller may see them; `display_lines` renders it). A decision is a
`ResumeRun` bound to that argsHash and to the display's digest; the client (the shell) signs it with the approving
service's key (`runfacts.security.approvals`); the decider checks role, expiry, arguments and
signature.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from runfacts.client.errors import BadArgument
from runfacts.privacy.envelope import KeyView, reveal
from runfacts.processors.decider.state import RunState
from runfacts.processors.policy.display import display_lines, masked
from runfacts.schemas.common import Actor, ArgDisplay
from runfacts.security.approvals import ApprovalRequest

__all__ = ["Approval", "UiSettings", "approvals_of", "asks", "display_lines", "masked", "resume_for", "resume_payload",
           "revealed"]


@dataclass(frozen=True)
class UiSettings:
    """The service that authenticates approvers: its auth source and its signing keys."""

    auth_source: str = "dashboard"
    signing_env: Mapping[str, str] | None = field(default=None, repr=False)
    """Where the approval keyring is (default: this process's RUNFACTS_APPROVAL_KEYS[_FILE])."""


@dataclass(frozen=True)
class Approval:
    """One pending approval, as a UI lists it."""

    run_id: str
    approval_id: str
    tool_call_id: str
    asks: str
    risk: str
    required_role: str
    expires_at: datetime
    args_hash: str
    tenant: str | None
    requesters: tuple[str, ...]
    """Who the request stands for (the run's user, its creator when a person): without
    self-approval none of them may decide it (the decider refuses `self_approval_forbidden`)."""
    display: ArgDisplay | None = None
    """The arguments as the approver sees them (None: proposed without a display)."""
    display_digest: str | None = None
    """What the signed decision binds besides argsHash (`runfacts.processors.policy.display`)."""


def revealed(display: ArgDisplay | None, view: KeyView) -> ArgDisplay | None:
    """The display with sealed personal values revealed (`[erased]` after an erasure)."""
    if display is None:
        return None
    return display.model_copy(update={"fields": tuple(
        f.model_copy(update={"personalValue": reveal(f.personalValue, "personalValue", view)})
        if f.personalValue is not None else f for f in display.fields)})


def asks(state: RunState, approval_id: str) -> str:
    """What the approval asks, in plain words (as the user view's banner says it)."""
    approval = state.approvals[approval_id]
    call = state.toolCalls.get(approval.toolCallId)
    return (f"{call.action} on {call.target} ({approval.risk} risk)" if call is not None
            else f"tool call {approval.toolCallId} ({approval.risk} risk)")


def approvals_of(states: Iterable[RunState], role: str | None, tenant: str | None, now: datetime,
                 personal: bool = False) -> list[Approval]:
    """The open, unexpired approvals of running runs for `role` and `tenant`, oldest first;
    personal argument values masked unless `personal`."""
    found = []
    for state in states:
        if state.terminal or state.archived or (tenant is not None and state.tenant != tenant):
            continue
        for a in state.open_approvals():
            if a.expiresAt > now and (role is None or a.requiredRole == role):
                call = state.toolCalls.get(a.toolCallId)
                display = None if call is None else call.display
                found.append(Approval(state.runId, a.approvalId, a.toolCallId, asks(state, a.approvalId), a.risk,
                                      a.requiredRole, a.expiresAt, a.argsHash, state.tenant, a.requesters,
                                      display if personal else masked(display), a.displayDigest))
    return sorted(found, key=lambda a: a.expires_at)


def resume_for(approval: Approval, decision: str, approver: str | Actor,
               auth_source: str) -> tuple[Actor, ApprovalRequest]:
    """The approver's actor and what its signed token must bind (run, approval, argsHash,
    decision, approver); BadArgument for a decision other than approve/reject."""
    if decision not in ("approve", "reject"):
        raise BadArgument(approval.run_id, "decision", decision, "must be 'approve' or 'reject'")
    if isinstance(approver, str):
        if not approver.strip():
            raise BadArgument(approval.run_id, "approver", approver, "must name the person deciding")
        approver = Actor(subjectId=approver, roles=(approval.required_role,), tenant=approval.tenant,
                         authSource=auth_source)
    return approver, ApprovalRequest(approval.run_id, approval.approval_id, approval.args_hash, decision,
                                     approver.subjectId, approval.display_digest)


def resume_payload(request: ApprovalRequest, token: str | None) -> dict[str, Any]:
    """The ResumeRun payload: the decision bound to the argsHash, with its signed token."""
    return {"approvalId": request.approval_id, "decision": request.decision, "argsHash": request.args_hash,
            "approvalToken": token, "displayDigest": request.display_digest}
