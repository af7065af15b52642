"""Decide handlers for the tool-call track: propose, claim, reports, reconcile, retry, verify.

Execution: proposed -> authorized -> dispatching -> accepted -> completed | failed, with
result_unknown after dispatching/accepted. result_unknown never goes back to proposed or
authorized: it leaves only by reconciliation (SEMANTICS.md §4-5).
"""

from __future__ import annotations

from datetime import timedelta

from runfacts.processors.decider.commands import compensation
from runfacts.processors.decider.context import DecideContext, Draft, Rejected, draft
from runfacts.processors.decider.evolve import action_hash
from runfacts.processors.decider.state import FINAL_VERIFICATION, ApprovalState, RunState, ToolCallState
from runfacts.processors.policy.capabilities import CapabilityManifest
from runfacts.processors.policy.display import asks_approval, display_digest, normalize, problems
from runfacts.processors.policy.retry import call_idempotency_key
from runfacts.schemas import commands as cmd
from runfacts.schemas import events as ev
from runfacts.schemas.common import ArgDisplay, BudgetAmounts, CommandBase
from runfacts.schemas.errors import ConfigError

CLAIMABLE_STATUS = frozenset({"running", "waiting_for_approval", "compensating"})  # not review, cancel, end
ATTEMPT_SLOTS = 1_000  # > RetryPolicy.max_attempts (at most 100)


def lease_epoch(incarnation: int, attempt: int) -> int:
    """The lease epoch of `attempt` under dispatcher `incarnation` (docs/dispatcher.md)."""
    if not 1 <= attempt < ATTEMPT_SLOTS:
        raise ValueError(f"attempt={attempt}: expected 1..{ATTEMPT_SLOTS - 1}")
    return incarnation * ATTEMPT_SLOTS + attempt


def external_request_id(tool_call_id: str, attempt: int) -> str:
    """The provider-facing id of one dispatch attempt of a call."""
    return f"{tool_call_id}-a{attempt}"


def manifest_for(command: CommandBase, ctx: DecideContext, capability_id: str) -> CapabilityManifest:
    """The capability's manifest, or a rejection naming the unknown capability."""
    try:
        return ctx.capabilities.get(capability_id)
    except ConfigError as exc:
        raise Rejected(command, "unknown_capability", str(exc)) from None


def tool_call(command: CommandBase, state: RunState, tool_call_id: str) -> ToolCallState:
    """The run's tool call, or a rejection naming the unknown id."""
    call = state.toolCalls.get(tool_call_id)
    if call is None:
        settled = state.settledCalls.get(tool_call_id)
        if settled is not None:
            raise Rejected(command, "tool_call_settled", f"{tool_call_id} ended ({settled[0]}); "
                           "its record is compacted, its history is in the events log")
        raise Rejected(command, "unknown_tool_call", tool_call_id)
    return call


def _check_business_key(c: cmd.ProposeToolCall, state: RunState, key: str) -> None:
    """One live call per business key within the run: refused while an earlier call with the
    key has not failed (nor closed without running). Across runs the decider, partitioned by
    runId, cannot see; there the key itself dedupes at the provider (docs/tools.md)."""
    for other in state.toolCalls.values():
        if other.idempotencyKey == key and other.execution != "failed" and other.closedReason is None:
            raise Rejected(c, "duplicate_business_key",
                           f"{c.payload.businessKey} is already call {other.toolCallId} of run {state.runId} "
                           f"({other.execution})")


def propose(c: cmd.ProposeToolCall, state: RunState, ctx: DecideContext) -> list[Draft]:
    """A proposed side effect: authorized by policy, or waiting for an approval. A call proposed
    again after its approval expired is proposed anew for a new approval (`_reauthorized`)."""
    p = c.payload
    _check_can_propose(c, state)
    if _known(state, p.toolCallId):
        p = p.model_copy(update={"toolCallId": _reauthorized(c, state)})
    manifest = manifest_for(c, ctx, p.capabilityId)
    display = _validated_display(c, manifest)
    digest = None if display is None else display_digest(display)
    try:
        key = call_idempotency_key(c.runId, state.tenant, p.action, p.target, p.argsHash, p.businessKey)
    except ValueError as exc:
        raise Rejected(c, "invalid_tool_call", str(exc)) from None
    if p.businessKey is not None:
        _check_business_key(c, state, key)
    loop = _loop_review(c, state, ctx, action_hash(p.capabilityId, p.argsHash))
    if loop:
        return loop
    ids = {"turnId": p.turnId, "capabilityId": p.capabilityId, "reasoningObjectId": p.reasoningObjectId}
    drafts = _supersede(state, p) + [draft(
        ev.ToolCallProposed, **ids, toolCallId=p.toolCallId, argsHash=p.argsHash, argsRef=p.argsRef,
        target=p.target, action=p.action, risk=manifest.risk.value, summary=p.summary,
        businessKey=p.businessKey, display=display, displayDigest=digest)]
    why = approval_reason(manifest, display)
    if why is None:
        lease = lease_at_once(state, ctx, manifest, 0)
        drafts.append(draft(ev.ToolCallAuthorized, **ids, toolCallId=p.toolCallId, argsHash=p.argsHash,
                            leaseEpoch=lease))
        if lease is None:
            return drafts
        return drafts + dispatch_drafts(p.capabilityId, p.turnId, p.toolCallId,
                                        action_hash(p.capabilityId, p.argsHash), 1, key,
                                        external_request_id(p.toolCallId, 1), lease, None)
    approval_id = f"approval-{p.toolCallId}"
    expires = c.issuedAt + timedelta(milliseconds=manifest.approval_ttl_ms)
    return drafts + [
        draft(ev.ApprovalRequired, **ids, approvalId=approval_id, toolCallId=p.toolCallId,
              argsHash=p.argsHash, risk=manifest.risk.value, requiredRole=manifest.required_role,
              expiresAt=expires, summary=p.summary, display=display, displayDigest=digest, proposedBy=c.actor),
        draft(ev.RunPaused, reason="waiting_for_approval", approvalId=approval_id,
              detail=f"{p.action} {p.target} needs {manifest.required_role} approval{why}"),
    ]


def _validated_display(c: cmd.ProposeToolCall, manifest: CapabilityManifest) -> ArgDisplay | None:
    """The proposal's display with the schema's labels; `invalid_arguments` (naming each field
    and the bound it breaks) before anyone is asked. None: proposed without a display (a v2
    client), which an approval rule treats cautiously (it asks)."""
    if c.payload.display is None:
        return None
    schema = manifest.schema_or_none()
    display = normalize(c.payload.display, schema)
    bad = problems(display, schema)
    if bad:
        raise Rejected(c, "invalid_arguments", f"{manifest.capability_id}: {'; '.join(bad)}")
    return display


def approval_reason(manifest: CapabilityManifest, display: ArgDisplay | None) -> str | None:
    """Why the call needs a person ('' for needsApproval, ' (rule: ...)' for the rule), or None
    when policy authorizes it at once."""
    if manifest.needs_approval:
        return ""
    if not manifest.approval_when:
        return None
    why = asks_approval(manifest.approval_when, display or ArgDisplay(), manifest.schema_or_none())
    return None if why is None else f" ({why})"


def _known(state: RunState, call_id: str) -> bool:
    return call_id in state.toolCalls or call_id in state.settledCalls


def _ended_by(state: RunState, call_id: str) -> str | None:
    call = state.toolCalls.get(call_id)
    return call.closedReason if call is not None else state.settledCalls[call_id][0]


def _reauthorized(c: cmd.ProposeToolCall, state: RunState) -> str:
    """The id a proposal of a known call id is made under: re-authorization (SEMANTICS §13). Its
    re-authorization chain is the id, then `<id>-r1`, `<id>-r2`, ... (`ops.control.reauthorize_command`
    names them so too); when the latest link's approval expired (the call closed `approval_expired`,
    also a grant that lapsed before dispatch), the same arguments are proposed again as the next link,
    for a new approval and with the same idempotency key. Otherwise the call stands: `already_proposed`
    (naming the latest link: re-proposing an open request never makes a second one), or
    `tool_call_exists` for other arguments."""
    p = c.payload
    existing = state.toolCalls.get(p.toolCallId)
    same = existing.argsHash == p.argsHash if existing is not None else (
        p.argsHash.startswith(state.settledCalls[p.toolCallId][1]))
    if not same:
        raise Rejected(c, "tool_call_exists", f"{p.toolCallId} exists with other arguments; changed arguments "
                       "need a new toolCallId")
    latest, n = p.toolCallId, 1
    while _known(state, f"{p.toolCallId}-r{n}"):
        latest, n = f"{p.toolCallId}-r{n}", n + 1
    how = _ended_by(state, latest)
    if how != "approval_expired":
        call = state.toolCalls.get(latest)
        now = how or (call.execution if call is not None else "settled")
        raise Rejected(c, "already_proposed", f"{p.toolCallId} is proposed as {latest} ({now}); "
                       "changed arguments need a new toolCallId")
    return f"{p.toolCallId}-r{n}"


def _check_can_propose(c: cmd.ProposeToolCall, state: RunState) -> None:
    reauthorizing = state.status == "waiting_for_review" and state.statusReason == "approval_expired"
    if state.status not in ("running", "waiting_for_approval") and not reauthorizing:
        raise Rejected(c, "run_not_active", f"run is {state.status}")


def _supersede(state: RunState, p: cmd.ProposeToolCallPayload) -> list[Draft]:
    """Open approvals for the same action and target with other arguments stop binding."""
    out = []
    for approval in state.open_approvals():
        old = state.toolCalls[approval.toolCallId]
        if old.action == p.action and old.target == p.target and old.argsHash != p.argsHash:
            out.append(draft(ev.ApprovalInvalidated, approvalId=approval.approvalId,
                             toolCallId=old.toolCallId, reason="args_changed",
                             detail=f"superseded by {p.toolCallId}"))
    return out


def _loop_review(c: CommandBase, state: RunState, ctx: DecideContext, action: str) -> list[Draft]:
    """needs_review instead of the action when it was tried `loop_threshold` times already."""
    if state.actionCounts.get(action, 0) < ctx.loop_threshold:
        return []
    return [draft(ev.RunNeedsReview, reason="loop_detected", attemptedPath=list(state.attemptedPath),
                  detail=f"{action} repeated {state.actionCounts[action]} times")]


def lapsed_authorization(state: RunState, call: ToolCallState, approval: ApprovalState) -> list[Draft]:
    """A grant that expired before a dispatch attempt: the approval expires, the call closes
    and a running run pauses for re-authorization (SEMANTICS.md §6): propose the same
    arguments again for a new approval (same argsHash, so the same idempotency key)."""
    drafts = [draft(ev.ApprovalExpired, capabilityId=call.capabilityId, approvalId=approval.approvalId,
                    toolCallId=call.toolCallId, expiresAt=approval.expiresAt)]
    if state.status == "running":
        drafts.append(draft(ev.RunPaused, reason="approval_expired", approvalId=approval.approvalId,
                            detail=f"{call.toolCallId}: the grant expired at {approval.expiresAt.isoformat()} "
                                   f"before dispatch attempt {call.attempts + 1}; re-authorization "
                                   "needed: propose the call again"))
    return drafts


def claim(c: cmd.ClaimToolCall, state: RunState, ctx: DecideContext) -> list[Draft]:
    """A dispatcher claims an authorized call: the claim is a fact before any call is made.
    Every claim (the first and a re-dispatch after not_found) re-checks the grant's expiry."""
    p = c.payload
    call = tool_call(c, state, p.toolCallId)
    if call.revoked:
        raise Rejected(c, "grant_revoked", f"{call.toolCallId}: its grant ended with the run ({state.status})")
    _check_claimable(c, call, ctx)
    if state.status not in CLAIMABLE_STATUS:
        raise Rejected(c, "run_not_active", f"run is {state.status}: no new dispatches")
    lapsed = state.lapsed_grant(call, c.issuedAt)
    if lapsed is not None:
        return lapsed_authorization(state, call, lapsed)
    over = _over_budget(state, BudgetAmounts(toolCalls=1))
    if over:
        return over
    approval = state.approvals.get(call.approvalId or "")
    granted = approval.approvalId if approval is not None and approval.status == "granted" else None
    return dispatch_drafts(call.capabilityId, call.turnId, call.toolCallId,
                           action_hash(call.capabilityId, call.argsHash), p.attempt, p.idempotencyKey,
                           p.externalRequestId, p.leaseEpoch, granted)


def dispatch_drafts(capability_id: str, turn_id: str | None, tool_call_id: str, action: str, attempt: int,
                    key: str, request_id: str, epoch: int, granted: str | None) -> list[Draft]:
    """A dispatch attempt's facts: `dispatching` with its lease, the granted approval (if any)
    consumed, one tool call debited. Written for an accepted claim, or with the authorization
    itself when the decider knows the dispatcher (`lease_at_once`)."""
    ids = {"capabilityId": capability_id, "turnId": turn_id}
    drafts = [draft(ev.ToolCallDispatching, **ids, toolCallId=tool_call_id, attempt=attempt,
                    idempotencyKey=key, externalRequestId=request_id, leaseEpoch=epoch)]
    if granted is not None:
        drafts.append(draft(ev.ApprovalConsumed, approvalId=granted, toolCallId=tool_call_id))
    drafts.append(draft(ev.BudgetDebited, amounts=BudgetAmounts(toolCalls=1), actionHash=action))
    return drafts


def lease_at_once(state: RunState, ctx: DecideContext, manifest: CapabilityManifest, leased: int) -> int | None:
    """The lease of attempt 1 when an authorization may dispatch at once (ADR 0011), else None
    (the dispatcher claims, as before): the shell knows the partition's dispatcher
    (`ctx.dispatcher_incarnation`), the run takes dispatches, the budget has a tool call left,
    and a dispatch lost with its dispatcher can be settled by a lookup or a rerun (a capability
    without a lookup keeps the claim: a lost lease would park its run in needs_review).
    `leased`: the call's epoch so far (0 for a call never dispatched)."""
    incarnation = ctx.dispatcher_incarnation
    if incarnation is None or state.status not in CLAIMABLE_STATUS:
        return None
    if not (manifest.has_lookup or manifest.reruns_safely):
        return None
    if _over_budget(state, BudgetAmounts(toolCalls=1)):
        return None
    epoch = lease_epoch(incarnation, 1)
    return epoch if epoch > leased else None


def _check_claimable(c: cmd.ClaimToolCall, call: ToolCallState, ctx: DecideContext) -> None:
    p = c.payload
    redispatch = call.execution == "result_unknown" and call.reconciliation == "not_found"
    if call.closedReason is not None:
        raise Rejected(c, "tool_call_closed", call.closedReason)
    if call.execution != "authorized" and not redispatch:
        raise Rejected(c, "not_claimable", f"{call.toolCallId} is {call.execution}")
    if p.idempotencyKey != call.idempotencyKey:
        raise Rejected(c, "idempotency_key_mismatch", f"the call's key is {call.idempotencyKey}")
    if p.leaseEpoch <= call.leaseEpoch:
        raise Rejected(c, "stale_lease", f"epoch {p.leaseEpoch} <= {call.leaseEpoch}")
    if p.attempt != call.attempts + 1:
        raise Rejected(c, "wrong_attempt", f"next attempt is {call.attempts + 1}")
    max_attempts = manifest_for(c, ctx, call.capabilityId).retry.max_attempts
    if p.attempt > max_attempts:
        raise Rejected(c, "max_attempts", f"attempt {p.attempt} > {max_attempts}")


def _over_budget(state: RunState, amounts: BudgetAmounts) -> list[Draft]:
    """BudgetExceeded + needs_review for the first dimension `amounts` would overdraw."""
    limits, used, reserved = state.budget.limits, state.budget.used, state.budget.reserved
    for field, dimension in DIMENSIONS:  # what live children hold (their sub-budgets) is not the run's to spend
        limit, want = getattr(limits, field), getattr(amounts, field)
        have = getattr(used, field) + getattr(reserved, field)
        if limit > 0 and want > 0 and have + want > limit:
            return [draft(ev.BudgetExceeded, dimension=dimension, limit=limit, used=have),
                    draft(ev.RunNeedsReview, reason="budget_exceeded",
                          detail=f"{dimension}: {have} used + {want} > {limit}",
                          attemptedPath=list(state.attemptedPath))]
    return []


DIMENSIONS = (("steps", "steps"), ("toolCalls", "tool_calls"), ("tokens", "tokens"),
              ("wallTimeMs", "wall_time"), ("costMicros", "cost"))


def _reported_call(c: CommandBase, state: RunState, tool_call_id: str, attempt: int,
                   external_request_id: str) -> ToolCallState:
    """The call a dispatcher reports on; a report from an older attempt is stale."""
    call = tool_call(c, state, tool_call_id)
    if attempt != call.attempts or external_request_id != call.externalRequestId:
        raise Rejected(c, "stale_report", f"current attempt {call.attempts} "
                       f"request {call.externalRequestId}")
    return call


def _require_execution(c: CommandBase, call: ToolCallState, allowed: tuple[str, ...]) -> None:
    if call.execution == "result_unknown":
        raise Rejected(c, "reconciliation_required", f"{call.toolCallId} is result_unknown")
    if call.execution not in allowed:
        raise Rejected(c, "duplicate_report" if call.execution in ("accepted", "completed", "failed")
                       else "not_dispatched", f"{call.toolCallId} is {call.execution}")


def report_accepted(c: cmd.ReportToolAccepted, state: RunState, ctx: DecideContext) -> list[Draft]:
    p = c.payload
    call = _reported_call(c, state, p.toolCallId, p.attempt, p.externalRequestId)
    _require_execution(c, call, ("dispatching",))
    return [draft(ev.ToolCallAccepted, capabilityId=call.capabilityId, toolCallId=p.toolCallId,
                  attempt=p.attempt, externalRequestId=p.externalRequestId)]


def report_completed(c: cmd.ReportToolCompleted, state: RunState, ctx: DecideContext) -> list[Draft]:
    """The completion, verification pending; and settled in the same decision when the report
    already knows it (v3 `verification`: the tool answered the dispatcher itself), so the track
    still reads pending -> settled but nobody polls for what is known (docs/dispatcher.md)."""
    p = c.payload
    call = _reported_call(c, state, p.toolCallId, p.attempt, p.externalRequestId)
    _require_execution(c, call, ("dispatching", "accepted"))
    ids = {"capabilityId": call.capabilityId, "toolCallId": p.toolCallId}
    known = p.verification
    return [
        draft(ev.ToolCallCompleted, **ids, attempt=p.attempt, externalRequestId=p.externalRequestId,
              resultRef=p.resultRef, resultHash=p.resultHash, result=p.result),
        draft(ev.VerificationUpdated, **ids, status="pending"),
        *([draft(ev.VerificationUpdated, **ids, status=known, evidenceRef=p.resultRef)]
          if known in FINAL_VERIFICATION else []),
        *compensation.plan(state, call, ctx, p.result),
    ]


def report_failed(c: cmd.ReportToolFailed, state: RunState, ctx: DecideContext) -> list[Draft]:
    p = c.payload
    call = _reported_call(c, state, p.toolCallId, p.attempt, p.externalRequestId)
    _require_execution(c, call, ("dispatching", "accepted"))
    return [draft(ev.ToolCallFailed, capabilityId=call.capabilityId, toolCallId=p.toolCallId,
                  attempt=p.attempt, externalRequestId=p.externalRequestId,
                  errorClass=p.errorClass, retryable=p.retryable, detail=p.message)]


def report_unknown(c: cmd.ReportResultUnknown, state: RunState, ctx: DecideContext) -> list[Draft]:
    """The response was lost: result_unknown, and reconciliation is requested at once."""
    p = c.payload
    call = _reported_call(c, state, p.toolCallId, p.attempt, p.externalRequestId)
    _require_execution(c, call, ("dispatching", "accepted"))
    deadline_ms = manifest_for(c, ctx, call.capabilityId).reconciliation_deadline_ms
    ids = {"capabilityId": call.capabilityId}
    return [
        draft(ev.ToolCallResultUnknown, **ids, toolCallId=p.toolCallId, attempt=p.attempt,
              externalRequestId=p.externalRequestId, lastError=p.lastError),
        draft(ev.ToolCallReconciliationRequested, **ids, toolCallId=p.toolCallId,
              externalRequestId=p.externalRequestId,
              deadline=c.issuedAt + timedelta(milliseconds=deadline_ms)),
    ]


def _unknown_call(c: CommandBase, state: RunState, tool_call_id: str, request_id: str) -> ToolCallState:
    """A result_unknown call addressed by the request the dispatcher sent."""
    call = tool_call(c, state, tool_call_id)
    if call.execution != "result_unknown":
        raise Rejected(c, "not_result_unknown", f"{call.toolCallId} is {call.execution}")
    if request_id != call.externalRequestId:
        raise Rejected(c, "stale_report", f"request {call.externalRequestId}")
    return call


def request_reconciliation(c: cmd.RequestReconciliation, state: RunState, ctx: DecideContext) -> list[Draft]:
    """Ask again to reconcile a call still unknown (a fresh deadline)."""
    p = c.payload
    call = _unknown_call(c, state, p.toolCallId, p.externalRequestId)
    deadline_ms = manifest_for(c, ctx, call.capabilityId).reconciliation_deadline_ms
    return [draft(ev.ToolCallReconciliationRequested, capabilityId=call.capabilityId,
                  toolCallId=p.toolCallId, externalRequestId=p.externalRequestId,
                  deadline=c.issuedAt + timedelta(milliseconds=deadline_ms))]


def report_reconciled(c: cmd.ReportReconciled, state: RunState, ctx: DecideContext) -> list[Draft]:
    """What the external system said about a result_unknown call."""
    p = c.payload
    call = _unknown_call(c, state, p.toolCallId, p.externalRequestId)
    ids = {"capabilityId": call.capabilityId}
    drafts = [draft(ev.ToolCallReconciled, **ids, toolCallId=p.toolCallId,
                    externalRequestId=p.externalRequestId, outcome=p.outcome,
                    resultRef=p.resultRef, resultHash=p.resultHash, result=p.result)]
    if p.outcome == "found_completed":  # a completion found may need undoing: reconciliation ends in "compensate"
        drafts.append(draft(ev.VerificationUpdated, **ids, toolCallId=p.toolCallId, status="pending"))
        drafts += compensation.plan(state, call, ctx, p.result)
    lapsed = state.lapsed_grant(call, c.issuedAt) if p.outcome == "not_found" else None
    if lapsed is not None and state.status != "cancelling":  # no re-dispatch on the old grant
        drafts += lapsed_authorization(state, call, lapsed)
    past_deadline = call.reconcileDeadline is not None and c.issuedAt >= call.reconcileDeadline
    if p.outcome == "still_unknown" and state.status != "needs_review":
        if past_deadline:
            drafts.append(draft(ev.RunNeedsReview, reason="unresolved_side_effect",
                                detail=f"{call.toolCallId} still unknown after its reconciliation deadline"))
        elif not state.terminal and not _has_lookup(ctx, call.capabilityId):  # nothing will tell: a person, now
            drafts.append(draft(ev.RunNeedsReview, reason="unresolved_side_effect",
                                detail=f"{call.toolCallId} ({call.capabilityId}): the outcome is unknown and "
                                       "the tool has no lookup to reconcile it: check the target system"))
    return drafts


def _has_lookup(ctx: DecideContext, capability_id: str) -> bool:
    """Can the capability's tool reconcile an unknown outcome (True when no manifest says)?"""
    try:
        return ctx.capabilities.get(capability_id).has_lookup
    except ConfigError:
        return True


def retry(c: cmd.RetryToolCall, state: RunState, ctx: DecideContext) -> list[Draft]:
    """A person retries a failed call whose error is retryable, within max attempts."""
    call = tool_call(c, state, c.payload.toolCallId)
    if call.execution == "result_unknown":
        raise Rejected(c, "result_unknown_needs_reconciliation", call.toolCallId)
    if call.execution != "failed":
        raise Rejected(c, "not_failed", f"{call.toolCallId} is {call.execution}")
    if not call.retryable:
        raise Rejected(c, "not_retryable", f"{call.toolCallId} failed with {call.errorClass}")
    if state.status != "running":
        raise Rejected(c, "run_not_active", f"run is {state.status}")
    max_attempts = manifest_for(c, ctx, call.capabilityId).retry.max_attempts
    if call.attempts >= max_attempts:
        raise Rejected(c, "max_attempts", f"{call.attempts} of {max_attempts} used")
    lapsed = state.lapsed_grant(call, c.issuedAt)
    if lapsed is not None:
        raise Rejected(c, "approval_expired", f"{lapsed.approvalId} expired at "
                       f"{lapsed.expiresAt.isoformat()}: propose the call again for a new approval")
    return [draft(ev.ToolCallRetryRequested, capabilityId=call.capabilityId,
                  toolCallId=call.toolCallId, actor=c.actor)]


def report_verification(c: cmd.ReportVerification, state: RunState, ctx: DecideContext) -> list[Draft]:
    """Domain reality observed for a call (allowed after the run ended)."""
    p = c.payload
    call = tool_call(c, state, p.toolCallId)
    if call.execution not in ("completed", "failed"):
        raise Rejected(c, "not_finished", f"{call.toolCallId} is {call.execution}")
    if call.verification in ("confirmed_success", "confirmed_failure") and call.verification != p.status:
        raise Rejected(c, "verification_final", f"{call.toolCallId} is {call.verification}")
    return [draft(ev.VerificationUpdated, capabilityId=call.capabilityId, toolCallId=p.toolCallId,
                  status=p.status, evidenceRef=p.evidenceRef)]


def report_held(c: cmd.ReportToolHeld, state: RunState, ctx: DecideContext) -> list[Draft]:
    """A dispatcher holds a call of a paused capability: the run says why the call waits. Only a
    call that waits for a claim, or a claimed call between tries, can be held; the same pause
    reported again records nothing (a dispatcher re-checks a held call until it is resumed)."""
    p = c.payload
    call = tool_call(c, state, p.toolCallId)
    if not (call.awaiting_claim or call.execution == "dispatching") or call.closedReason is not None:
        raise Rejected(c, "not_waiting", f"{call.toolCallId} is {call.execution}: only a call waiting for a "
                       "claim or a retry is held")
    if call.held is not None and call.held.pauseId == p.pauseId:
        return []
    return [draft(ev.ToolCallHeld, capabilityId=call.capabilityId, toolCallId=call.toolCallId,
                  pauseId=p.pauseId, pausedBy=p.pausedBy, reason=p.reason, pausedAt=p.pausedAt)]
