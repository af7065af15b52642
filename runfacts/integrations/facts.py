"""What runfacts' facts say about one gated tool call, pure: the verdict a framework bridge resumes on.

A bridge never resumes on what its client sends (a resume value, an "approved" flag): it reads
the run's journal and asks `verdict`. The framework's own approval is a UI convenience; this is
the authorization boundary (role-checked, signed, single-use, expiring, bound to the argsHash).
Both bridges share this: the `Gate` of a tool, its call id, its approval as a UI (`approval_request`)
and `rf.decide` (`approval_of`) take it, the verdict, and the text a failed call shows the model.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from runfacts.client import errors, outcomes
from runfacts.client.approvals import Approval, display_lines, masked
from runfacts.client.outcomes import Entry, Keys
from runfacts.integrations.errors import OutcomeNotKnown
from runfacts.processors.policy.access import requesters
from runfacts.processors.policy.retry import args_hash

Status = Literal["unknown", "pending", "granted", "rejected", "expired", "refused"]


@dataclass(frozen=True)
class Gate:
    """How a framework tool is proposed to runfacts: the capability the dispatcher serves (same
    arguments), the target (an argument's name, or a function of the arguments), the action and
    risk the proposal names (default: the capability's last part, "medium"), and its summary."""

    capability: str
    target: str | Callable[[Mapping[str, Any]], str]
    action: str | None = None
    risk: str = "medium"
    summary: Callable[[Mapping[str, Any]], str] | None = None

    def target_of(self, args: Mapping[str, Any]) -> str:
        return str(self.target(args) if callable(self.target) else args[self.target])

    def action_name(self) -> str:
        return self.action or self.capability.rsplit(".", 1)[-1]

    def summary_of(self, args: Mapping[str, Any]) -> str | None:
        return None if self.summary is None else self.summary(args)


@dataclass(frozen=True)
class Verdict:
    """A gated call as runfacts knows it: `unknown` (never proposed), `pending` (waits for a
    person), `granted` (authorized: by policy or an approver), `rejected`, `expired`, or
    `refused` (invalidated, cancelled, needs review, run ended); `reason` says why in words."""

    status: Status
    tool_call_id: str
    reason: str = ""
    approver: str | None = None
    request: dict[str, Any] | None = None
    """For a call that asked for approval: approvalId, asks, expiresAt (ISO 8601), argsHash, ..."""


def call_id(run_id: str, capability: str, target: str, arguments: dict[str, Any]) -> str:
    """The runfacts toolCallId of (capability, target, arguments) in a run: `Run.propose`'s default,
    so the same model call proposed again (after a crash, on resume) is the same runfacts call."""
    digest = args_hash(arguments)
    return f"call-{hashlib.sha256(f'{run_id}|{capability}|{target}|{digest}'.encode()).hexdigest()[:20]}"


def current_call_id(entries: Sequence[Entry], run_id: str, capability: str, target: str,
                    arguments: dict[str, Any]) -> str:
    """The runfacts call a model call stands for now: `call_id`'s latest re-authorization (`<id>-r<n>`,
    proposed again after its approval expired), or `call_id` itself."""
    return outcomes.latest_link(entries, call_id(run_id, capability, target, arguments))


def approval_of(entries: Sequence[Entry], tool_call_id: str, action: str, target: str) -> Approval | None:
    """The call's open approval as `rf.decide` takes it (and `rf.approvals()` lists it), from the
    run's facts (None: it asked for none)."""
    found = outcomes.pending_approval(entries, tool_call_id)
    if found is None:
        return None
    p = found.payload
    created: Any = next((e.event.payload for e in entries if e.event_type == "run.created"), None)
    who = () if created is None else requesters(created.userId, created.actor, p.proposedBy)
    return Approval(found.runId, p.approvalId, tool_call_id, f"{action} on {target} ({p.risk} risk)", p.risk,
                    p.requiredRole, p.expiresAt, p.argsHash, getattr(created, "tenant", None), who,
                    masked(p.display), p.displayDigest)


def approval_request(entries: Sequence[Entry], tool_call_id: str, action: str, target: str) -> dict[str, Any] | None:
    """The call's latest approval request in the words a UI shows (None: it asked for none)."""
    found = approval_of(entries, tool_call_id, action, target)
    if found is None:
        return None
    return {"runId": found.run_id, "toolCallId": tool_call_id, "approvalId": found.approval_id,
            "asks": found.asks, "risk": found.risk, "requiredRole": found.required_role,
            "expiresAt": found.expires_at.isoformat(), "argsHash": found.args_hash,
            "arguments": display_lines(found.display) if found.display is not None else None,
            "displayDigest": found.display_digest}


def verdict(run_id: str, entries: Sequence[Entry], tool_call_id: str, request: dict[str, Any] | None = None) -> Verdict:
    """The verdict the run's facts give the call (entries: the run's journal from its start)."""
    if not any(e.tool_call_id == tool_call_id for e in entries):
        return Verdict("unknown", tool_call_id, "runfacts holds no proposal of this call", request=request)
    decided = outcomes.call_decision(run_id, entries, tool_call_id)
    if decided is None:
        return Verdict("pending", tool_call_id, "waits for approval", request=request)
    error = decided.error
    if error is None:
        who = decided.value.approver
        return Verdict("granted", tool_call_id, f"approved by {who}" if who else "authorized by policy", who, request)
    if isinstance(error, errors.ApprovalRejected):
        return Verdict("rejected", tool_call_id, f"rejected by {error.approver}", error.approver, request)
    if isinstance(error, errors.ApprovalExpired):
        return Verdict("expired", tool_call_id, "the approval expired before anyone decided; "
                                               "propose the call again to re-authorize", request=request)
    return Verdict("refused", tool_call_id, str(error), request=request)


def failure_text(tool: str, failed: errors.ToolFailed) -> str:
    """What the model is told of a gated call that failed after runfacts authorized it (the
    bridges hand it over as the framework's failed tool result, so the model can react).
    Calling the tool again with the same arguments is the same runfacts call: it answers with
    this failure again and never runs the side effect a second time."""
    detail = f": {failed.detail}" if failed.detail else ""
    again = "an operator may retry it through runfacts" if failed.retryable else "not retryable"
    ran = ("its arguments were refused, so nothing happened" if failed.error_class == "validation"
           else "ran once")
    return (f"{tool} failed ({failed.error_class}{detail}; {again}). It was authorized and {ran}; runfacts "
            f"will not run this call again (runfacts call {failed.tool_call_id})")


def rejected_arguments(exc: BaseException) -> str | None:
    """What was wrong when the decider refused a proposal's arguments against the tool's schema
    (a CommandRejected with reason `invalid_arguments`), else None: the bridges show it to the
    model as the framework's own invalid-arguments error, never as "approval required"."""
    if isinstance(exc, errors.CommandRejected) and exc.reason == "invalid_arguments":
        return exc.detail or "the arguments do not fit the tool's schema"
    return None


def settle(run_id: str, entries: Sequence[Entry], tool_call_id: str, tool: str, ended: errors.ClientError,
           keys: Keys | None = None) -> Any:
    """An authorized call's outcome when waiting for it ended with the run (`ended`: RunCancelled,
    RunEnded, RunNeedsReview) instead of with the call's own fact: the call's own outcome when the
    facts hold one (it ran: returns its value, or raises its ToolFailed); OutcomeNotKnown when it
    was dispatched and nothing says how it ended (it may have happened); else raises `ended` (it
    never left: not done). The bridges tell the model this, never "not done" for a call that ran."""
    own = [e for e in entries if e.tool_call_id == tool_call_id]
    found = outcomes.call_result(run_id, own, tool_call_id, *(() if keys is None else (keys,)))
    if found is not None and (found.error is None or isinstance(found.error, errors.ToolFailed)):
        return found.unwrap()
    if any(e.event_type == "tool.call.dispatching" for e in own):
        raise OutcomeNotKnown(run_id, tool_call_id, tool, str(ended).split(": ")[-1])
    raise ended
