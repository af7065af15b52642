"""The dispatcher's pure core: what an event asks of the side-effect shell, and which
commands an observed outcome becomes.

No I/O, no clock: the shell passes `now_ms`, the run's state (folded from the events with
the run decider's own `evolve`) and its incarnation; it performs the `Work` and feeds the
adapter's typed outcomes back through `after_execute`, `after_lookup`, `after_verify` and
`after_cancel`. Invariants:
1. A claim's lease epoch is `incarnation * ATTEMPT_SLOTS + attempt`: greater for every
   later incarnation, and for every later attempt within one (the decider wants each claim
   of a call to carry a greater epoch than the last).
2. A tool is executed only for a `tool.call.dispatching` whose epoch is THIS incarnation's
   (after a claim, or written by the decider with an authorization that carries the lease
   of the partition's last claimant, ADR 0011: such an `authorized` asks for nothing).
   Any other is never executed: it becomes `result_unknown` (the earlier holder may have
   called before it died), and reconciliation decides.
3. Every attempt of a call carries the call's one idempotency key; only the
   externalRequestId (`<toolCallId>-a<attempt>`) and the epoch change between claims.
4. Retryable errors are retried inside the claim (same key, same request id) per the
   capability's retry policy; an unknown outcome is never retried, only looked up.
5. Except for a capability that reruns safely (manifest `readOnly` or `idempotent`): a try
   lost with an earlier incarnation is run again (invariant 2 does not bind it), an unknown
   outcome is a retryable `transient` failure, and a lookup that cannot say is `not_found`
   (run it again), so such a call never parks its run in needs_review.
"""

from __future__ import annotations

from typing import Any, Final, Literal, NamedTuple

from pydantic import BaseModel, ConfigDict

from runfacts.processors.decider.commands.tools import (  # one lease scheme for claims and the decider's own
    ATTEMPT_SLOTS,
    CLAIMABLE_STATUS,
    external_request_id,
    lease_epoch,
)
from runfacts.processors.decider.state import RunState, ToolCallState
from runfacts.processors.dispatcher.adapters import (
    FoundCompleted,
    FoundFailed,
    LookupOutcome,
    LookupUnknown,
    NotFound,
    Pause,
    ToolCompleted,
    ToolFailed,
    ToolOutcome,
    ToolUnknown,
    Verification,
)
from runfacts.processors.engine.versions import Migrations
from runfacts.processors.policy.display import display_digest, rerender
from runfacts.processors.policy.retry import ErrorClass, GiveUp, RetryPolicy, backoff_ms, is_retryable, next_retry
from runfacts.schemas import commands as cmd
from runfacts.schemas import events as ev
from runfacts.schemas.base import Record
from runfacts.schemas.common import CommandBase, EventBase
from runfacts.schemas.models import payload_class

PROGRESS_FORMAT: Final = 3
"""`Progress.stateFormat` (the stored shape's version)."""
Phase = Literal["idle", "executing", "retry_wait", "reconciling", "verifying", "done"]
MESSAGE_CHARS = 500
RESULT_MAX_BYTES = 16_384  # default cap of a result value on the log (RUNFACTS_TOOL_RESULT_MAX_BYTES)


def incarnation_of(epoch: int) -> int:
    """The incarnation that claimed with lease epoch `epoch`."""
    return epoch // ATTEMPT_SLOTS


class Progress(BaseModel):
    """The dispatcher's own memory of one call (what the run state does not hold)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    stateFormat: Literal[3] = PROGRESS_FORMAT
    """The stored shape's version (read with `load_progress`, which migrates older shapes)."""
    toolCallId: str
    correlationId: str
    phase: Phase = "idle"
    attempt: int = 0  # the claim these counters belong to
    tries: int = 0  # HTTP tries inside that claim
    firstTryMs: int = 0
    lookups: int = 0  # failed lookups in the current reconciliation / verification
    deadlineMs: int = 0  # reconciliation or verification deadline
    reportedStill: bool = False  # still_unknown already reported for this reconciliation
    polls: int = 0  # polls of the running try's future (execution off the transaction)
    throttles: int = 0  # tries of this claim the provider rate-limited (429): not counted as attempts


PROGRESS = Migrations("dispatcher progress", PROGRESS_FORMAT, {1: lambda value: value, 2: lambda value: value})
"""The progress record's shapes: 1 unmarked (with or without `polls`, which defaults to 0), 2 marked,
3 with `throttles` (defaults to 0: a record written before counted no throttle)."""


def load_progress(raw: bytes) -> Progress:
    """A stored progress record of any known version; `NewerStoredVersion` when a newer runfacts
    wrote it."""
    if PROGRESS.is_current(raw):
        return Progress.model_validate_json(raw)
    return Progress.model_validate(PROGRESS.read_json(raw))


class Draft(NamedTuple):
    """A command before the shell stamps id, actor, time and correlation on it."""

    command: type[CommandBase]
    payload: Record


def draft(command: type[CommandBase], **payload: Any) -> Draft:
    """A draft of `command` with a payload built (and validated) from keyword arguments."""
    return Draft(command, payload_class(command)(**payload))


class Step(NamedTuple):
    """What follows an outcome: commands to send, the call's new memory, when to come back."""

    drafts: list[Draft]
    progress: Progress
    wake_at_ms: int | None = None


# --- work: what an event asks of the shell -------------------------------------------

class Claim(NamedTuple):
    call: ToolCallState


class Execute(NamedTuple):
    call: ToolCallState


class ReportLost(NamedTuple):
    call: ToolCallState
    why: str


class Reconcile(NamedTuple):
    call: ToolCallState
    deadline_ms: int


class Verify(NamedTuple):
    call: ToolCallState


class Cancel(NamedTuple):
    call: ToolCallState


class Forget(NamedTuple):
    call: ToolCallState


Work = Claim | Execute | ReportLost | Reconcile | Verify | Cancel | Forget


def work_for(event: EventBase, run: RunState, incarnation: int,
             reruns: frozenset[str] = frozenset()) -> list[Work]:
    """The work `event` asks for, given the run's state AFTER the event and our incarnation;
    `reruns`: the capabilities whose calls are safely run again (invariant 5)."""
    if isinstance(event, ev.RunCancelRequested):
        return [Cancel(c) for c in run.in_flight_calls()]
    call_id = getattr(event.payload, "toolCallId", None)
    call = run.toolCalls.get(call_id) if isinstance(call_id, str) else None
    if call is None:
        return []
    if isinstance(event, ev.GrantRevoked):
        # nothing now: a try running off the transaction is still collected, a lookup still
        # reconciles (a read uses no grant); a retry due later is refused then (`refusal`)
        return []
    if isinstance(event, ev.ToolCallAuthorized) and event.payload.leaseEpoch is not None:
        return []  # the decider dispatched with the authorization: its `dispatching` follows (ADR 0011)
    if isinstance(event, ev.ToolCallAuthorized | ev.ToolCallRetryRequested):
        return [Claim(call)] if claimable(call, run) else []
    if isinstance(event, ev.ToolCallDispatching):
        return [_dispatching(event, call, incarnation, call.capabilityId in reruns)]
    if isinstance(event, ev.ToolCallReconciliationRequested):
        deadline = event.payload.deadline
        return [Reconcile(call, 0 if deadline is None else _ms(deadline))]
    if isinstance(event, ev.ToolCallReconciled):
        if event.payload.outcome == "still_unknown":
            return []  # we keep asking (our own timer)
        return [Claim(call)] if claimable(call, run) else [Forget(call)]
    if isinstance(event, ev.VerificationUpdated):
        return [Verify(call)] if event.payload.status == "pending" else [Forget(call)]
    if isinstance(event, ev.ToolCallCompleted | ev.ToolCallFailed):
        return [Forget(call)]
    return []


def _dispatching(event: ev.ToolCallDispatching, call: ToolCallState, incarnation: int,
                 reruns: bool) -> Work:
    held = incarnation_of(event.payload.leaseEpoch)
    if held == incarnation or reruns:  # a read-only / idempotent call is simply run (again)
        return Execute(call)
    return ReportLost(call, f"claimed by dispatcher incarnation {held}, this is {incarnation}: "
                            "the earlier holder may have called before it stopped")


def claimable(call: ToolCallState, run: RunState) -> bool:
    """Authorized (or reconciled not_found), not closed, and the run takes new dispatches."""
    ready = call.execution == "authorized" or (
        call.execution == "result_unknown" and call.reconciliation == "not_found")
    return ready and call.closedReason is None and run.status in CLAIMABLE_STATUS


def lapsed_grant(call: ToolCallState, run: RunState, now_ms: int) -> str | None:
    """Why `call` must not be claimed now: its approval's grant expired (SEMANTICS.md §6; the
    decider pauses the run for re-authorization at its expiry timer), or None."""
    grant = run.approvals.get(call.approvalId or "")
    if grant is None or grant.status not in ("granted", "consumed") or now_ms < _ms(grant.expiresAt):
        return None
    return f"{grant.approvalId} expired at {grant.expiresAt.isoformat()}: the run needs a new approval"


RefusalReason = Literal["grant_revoked", "run_ended", "grant_expired"]


class Refusal(NamedTuple):
    """Why a grant must not be used now: the reason is typed, the detail names the call."""

    reason: RefusalReason
    detail: str


def refusal(call: ToolCallState, run: RunState, now_ms: int) -> Refusal | None:
    """Why a claim, or a retry inside a claim's lease, of `call` is refused now, or None:
    its grant was revoked when the run ended (`grant.revoked`), the run has ended (the
    revocation not folded yet), or its approval's grant expired (SEMANTICS.md §6, §10)."""
    if call.revoked:
        return Refusal("grant_revoked", f"{call.toolCallId}: its grant was revoked when run "
                                        f"{run.runId} ended ({run.status})")
    if run.terminal or run.archived:
        return Refusal("run_ended", f"{call.toolCallId}: run {run.runId} is {run.status}")
    lapsed = lapsed_grant(call, run, now_ms)
    return None if lapsed is None else Refusal("grant_expired", lapsed)


HELD_POLL_MS = 1_000
"""How often a call held by a paused capability is looked at again (its resume dispatches it)."""


class Limits(NamedTuple):
    """A capability's limits per dispatcher (manifest `maxConcurrency`, `ratePerSecond`)."""

    max_concurrency: int | None = None
    rate_per_second: float | None = None


SLOT_POLL_MS = 50
"""How soon a call waiting for a free slot (max concurrency) looks again."""


def admit(limits: Limits, running: int, last_start_ms: int | None, now_ms: int) -> int | None:
    """None: a try of the capability may start now; else when to look again (a full house: in
    `SLOT_POLL_MS`; the rate: when the interval `1000 / ratePerSecond` since the last start ends)."""
    if limits.max_concurrency is not None and running >= limits.max_concurrency:
        return now_ms + SLOT_POLL_MS
    if limits.rate_per_second is not None and last_start_ms is not None:
        due = last_start_ms + -(-1000 // limits.rate_per_second)  # ceil: never faster than the rate
        if due > now_ms:
            return int(due)
    return None


def held_draft(call: ToolCallState, pause: Pause) -> Draft | None:
    """Report that `call` waits for its paused capability (once per pause: None when the run's
    state already says this pause holds it)."""
    if call.held is not None and call.held.pauseId == pause.pause_id:
        return None
    return draft(cmd.ReportToolHeld, toolCallId=call.toolCallId, pauseId=pause.pause_id,
                 pausedBy=pause.paused_by, reason=pause.reason, pausedAt=pause.paused_at)


def held(progress: Progress, call: ToolCallState, pause: Pause, now_ms: int, poll_ms: int = HELD_POLL_MS) -> Step:
    """A claim or a retry of a paused capability's call: no new attempt; report the hold, look again later."""
    report = held_draft(call, pause)
    return Step([] if report is None else [report], progress, now_ms + poll_ms)


def refused_draft(call: ToolCallState, refused: Refusal) -> Draft:
    """A retry refused inside a lease: the last try's failure stands, no try follows."""
    return failed_draft(call, refused.reason, False, refused.detail)


def _ms(at: Any) -> int:
    return int(at.timestamp() * 1000)


# --- commands -----------------------------------------------------------------------

def claim_draft(call: ToolCallState, incarnation: int) -> Draft | None:
    """Claim the next attempt of `call` with the call's one idempotency key (None: our
    epoch would not be greater than the call's, e.g. a lagging clock on another host)."""
    attempt = call.attempts + 1
    epoch = lease_epoch(incarnation, attempt)
    if epoch <= call.leaseEpoch:
        return None
    return draft(cmd.ClaimToolCall, toolCallId=call.toolCallId, attempt=attempt,
                 idempotencyKey=call.idempotencyKey,
                 externalRequestId=external_request_id(call.toolCallId, attempt), leaseEpoch=epoch)


def _report(command: type[CommandBase], call: ToolCallState, **payload: Any) -> Draft:
    return draft(command, toolCallId=call.toolCallId, attempt=call.attempts,
                 externalRequestId=call.externalRequestId or "", **payload)


def unknown_draft(call: ToolCallState, why: str) -> Draft:
    """The outcome of the current attempt is unknown: reconcile, never call blindly."""
    return _report(cmd.ReportResultUnknown, call, lastError=why[:MESSAGE_CHARS])


def failed_draft(call: ToolCallState, error_class: str, retryable: bool, message: str) -> Draft:
    return _report(cmd.ReportToolFailed, call, errorClass=error_class, retryable=retryable,
                   message=message[:MESSAGE_CHARS])


def display_mismatch(call: ToolCallState, arguments: dict[str, Any]) -> str | None:
    """Why the stored arguments are not what the decider evaluated and the approver saw (they
    render to another display digest), else None. A call proposed without a display has none."""
    if call.display is None or call.displayDigest is None:
        return None
    again = rerender(arguments, call.display)
    if display_digest(again) == call.displayDigest:
        return None
    shown = {f.name: f.value for f in call.display.fields if f.value is not None}
    real = {f.name: f.value for f in again.fields if f.value is not None}
    differ = sorted(n for n in {*shown, *real} if shown.get(n) != real.get(n))
    first = differ[0] if differ else "(fields, units or omissions)"
    return (f"{call.toolCallId}: the stored arguments do not render to the display the decider evaluated "
            f"(digest {call.displayDigest[:12]}): {first} shown {shown.get(first)!s}, stored {real.get(first)!s}; "
            "not executed: propose the call again with its real arguments")


def oversize(call: ToolCallState, result: str | None, cap: int) -> str | None:
    """Why `result` cannot travel on the log (it is over `cap` UTF-8 bytes), else None."""
    size = 0 if result is None else len(result.encode())
    if size <= cap:
        return None
    return (f"tool {call.capabilityId} returned a result of {size} bytes for {call.toolCallId}, "
            f"over the cap of {cap} (RUNFACTS_TOOL_RESULT_MAX_BYTES): return a smaller result "
            "(e.g. a reference to a document) or raise the cap")


def rerun_lost(call: ToolCallState, progress: Progress, policy: RetryPolicy, why: str) -> Draft | None:
    """A safely re-runnable call whose try was lost with an earlier incarnation: None (run it
    again), or a retryable failure once the tries of its claim reach the policy's attempts
    (a tool that takes its dispatcher down every time is not run forever)."""
    tries = progress.tries - progress.throttles  # rate-limited tries are no attempts
    if tries < policy.max_attempts:
        return None
    return failed_draft(call, ErrorClass.TRANSIENT.value, True,
                        f"{why}; lost {tries} times, the retry policy allows {policy.max_attempts}")


def _completed_draft(call: ToolCallState, found: ToolCompleted | FoundCompleted) -> Draft:
    """The completion, with its verification when it is already settled (the tool answered this
    process: the decider records it with the completion, no verification poll follows)."""
    settled = _SETTLED.get(found.verification)
    return _report(cmd.ReportToolCompleted, call, resultRef=found.result_ref, resultHash=found.result_hash,
                   result=found.result, verification=settled)


def _reconciled(call: ToolCallState, outcome: str, found: FoundCompleted | None = None) -> Draft:
    return draft(cmd.ReportReconciled, toolCallId=call.toolCallId,
                 externalRequestId=call.externalRequestId or "", outcome=outcome,
                 resultRef=found.result_ref if found else None,
                 resultHash=found.result_hash if found else None,
                 result=found.result if found else None)


def _verification(call: ToolCallState, status: str, evidence: str | None) -> Draft:
    return draft(cmd.ReportVerification, toolCallId=call.toolCallId, status=status,
                 evidenceRef=evidence)


# --- outcomes -> steps ----------------------------------------------------------------

def start_try(progress: Progress, call: ToolCallState, now_ms: int) -> Progress:
    """Count one more HTTP try of the call's current claim (a new claim starts at 1)."""
    if progress.attempt != call.attempts:
        progress = progress.model_copy(update={"attempt": call.attempts, "tries": 0, "throttles": 0,
                                               "firstTryMs": now_ms})
    return progress.model_copy(update={"tries": progress.tries + 1, "phase": "idle"})


class PollPolicy(NamedTuple):
    """How often the engine looks at a running call: first after `first_ms`, doubling to `max_ms`."""

    first_ms: int = 1
    max_ms: int = 500


def executing(progress: Progress, policy: PollPolicy, now_ms: int) -> Step:
    """A try started off the transaction: remember it runs, look again after `first_ms`."""
    running = progress.model_copy(update={"phase": "executing", "polls": 0})
    return Step([], running, now_ms + policy.first_ms)


def still_running(progress: Progress, policy: PollPolicy, now_ms: int) -> Step:
    """The try has not answered yet: look again later (doubling, capped)."""
    polls = progress.polls + 1
    wait = min(policy.max_ms, policy.first_ms * 2 ** min(polls, 16))
    return Step([], progress.model_copy(update={"polls": polls}), now_ms + wait)


def after_execute(outcome: ToolOutcome, call: ToolCallState, progress: Progress,
                  policy: RetryPolicy, now_ms: int, *, result_cap: int = RESULT_MAX_BYTES,
                  reruns: bool = False) -> Step:
    """Report completion / an unknown outcome, retry a retryable error, or report the failure.

    A completion whose result is over `result_cap` is reported `failed(result_too_large)`,
    not retryable: the tool may have acted, so it is never called again automatically.
    `reruns` (a read-only or idempotent capability): an unknown outcome is a `transient`
    failure, retried per the policy (invariant 5)."""
    idle = progress.model_copy(update={"phase": "idle"})
    if isinstance(outcome, ToolCompleted):
        too_large = oversize(call, outcome.result, result_cap)
        if too_large is not None:
            return Step([failed_draft(call, "result_too_large", False, too_large)], idle)
        return Step([_completed_draft(call, outcome)], idle)
    if isinstance(outcome, ToolUnknown) and reruns:
        outcome = ToolFailed.of(ErrorClass.TRANSIENT, "outcome_unknown", detail=f"{outcome.reason}; "
                                "safe to run again (read-only or idempotent)")
    elif isinstance(outcome, ToolUnknown):
        return Step([unknown_draft(call, outcome.reason)], idle)
    if outcome.error_class is ErrorClass.FENCED:
        why = f"fenced by the provider ({outcome.code}): a newer lease holder owns the key"
        return Step([unknown_draft(call, why)], idle)
    return _retry_or_fail(outcome, call, progress, policy, now_ms)


def _retry_or_fail(failed: ToolFailed, call: ToolCallState, progress: Progress,
                   policy: RetryPolicy, now_ms: int) -> Step:
    if failed.error_class is ErrorClass.RATE_LIMITED:
        return throttled(failed, call, progress, policy, now_ms)
    decision = next_retry(policy, progress.tries - progress.throttles, now_ms, progress.firstTryMs, failed.error_class,
                          retry_after_ms=failed.retry_after_ms,
                          jitter_seed=f"{call.idempotencyKey}:{call.attempts}")
    if isinstance(decision, GiveUp):
        message = f"{failed.code}: {failed.detail}; {decision.reason}: {decision.detail}"
        retryable = is_retryable(failed.error_class)
        draft_ = failed_draft(call, failed.error_class.value, retryable, message)
        return Step([draft_], progress.model_copy(update={"phase": "idle"}))
    waiting = progress.model_copy(update={"phase": "retry_wait"})
    return Step([], waiting, decision.retry_at_ms)


def throttled(failed: ToolFailed, call: ToolCallState, progress: Progress, policy: RetryPolicy,
              now_ms: int) -> Step:
    """The provider rate-limited the try (a 429, `ToolError("rate_limited")`): nothing happened and
    nothing failed. Wait as it says (Retry-After; without one, the policy's backoff over the
    throttles so far) and try again in the same claim; the try is not counted toward
    `maxAttempts`. Only the policy's deadline (from the claim's first try) bounds the waiting: a
    wait past it fails the call `rate_limited`, retryable, saying how often it was throttled."""
    throttles = progress.throttles + 1
    wait = (failed.retry_after_ms if failed.retry_after_ms is not None
            else backoff_ms(policy, throttles, f"throttle:{call.idempotencyKey}:{call.attempts}"))
    deadline = progress.firstTryMs + policy.deadline_ms
    if now_ms + wait > deadline:
        message = (f"{failed.code}: {failed.detail}; rate limited {throttles} time(s): the next try in {wait} ms "
                   f"would pass the retry deadline ({policy.deadline_ms} ms after the first try)")
        return Step([failed_draft(call, ErrorClass.RATE_LIMITED.value, True, message)],
                    progress.model_copy(update={"phase": "idle", "throttles": throttles}))
    waiting = progress.model_copy(update={"phase": "retry_wait", "throttles": throttles})
    return Step([], waiting, now_ms + wait)


def begin_lookups(progress: Progress, phase: Phase, deadline_ms: int) -> Progress:
    """A fresh reconciliation or verification: no failed lookups yet."""
    return progress.model_copy(update={"phase": phase, "lookups": 0, "deadlineMs": deadline_ms,
                                       "reportedStill": False})


def after_lookup(outcome: LookupOutcome, call: ToolCallState, progress: Progress,
                 policy: RetryPolicy, now_ms: int, *, result_cap: int = RESULT_MAX_BYTES,
                 reruns: bool = False) -> Step:
    """Reconciliation: report what the provider knows; ask again later while it cannot say.

    A found completion whose result is over `result_cap` cannot be recorded: it is reported
    `still_unknown` once and not asked again, so the decider's deadline hands it to a person.
    `reruns` (a read-only or idempotent capability): a lookup that cannot say is reported
    `not_found`, so the call is claimed and run again (invariant 5)."""
    done = progress.model_copy(update={"phase": "idle"})
    too_large = oversize(call, outcome.result, result_cap) if isinstance(outcome, FoundCompleted) else None
    if too_large is not None:
        outcome = LookupUnknown(reason=too_large, retryable=False)
    elif reruns and isinstance(outcome, LookupUnknown):
        outcome = NotFound()
    if isinstance(outcome, FoundCompleted):
        return Step([_reconciled(call, "found_completed", outcome)], done)
    if isinstance(outcome, FoundFailed):
        return Step([_reconciled(call, "found_failed")], done)
    if isinstance(outcome, NotFound):
        return Step([_reconciled(call, "not_found")], done)
    drafts = [] if progress.reportedStill else [_reconciled(call, "still_unknown")]
    progress = progress.model_copy(update={"reportedStill": True, "lookups": progress.lookups + 1})
    wake = _next_lookup(progress, policy, now_ms, call.idempotencyKey)
    if not outcome.retryable or wake is None:
        return Step(drafts, progress.model_copy(update={"phase": "idle"}))
    return Step(drafts, progress.model_copy(update={"phase": "reconciling"}), wake)


def _next_lookup(progress: Progress, policy: RetryPolicy, now_ms: int, seed: str) -> int | None:
    """When to look up again (backoff over failed lookups); None past the deadline."""
    wake = now_ms + backoff_ms(policy, progress.lookups, f"lookup:{seed}")
    return wake if progress.deadlineMs == 0 or wake < progress.deadlineMs else None


class VerifyPolicy(NamedTuple):
    """How verification polls: first delay, cap of the doubling delay, and the give-up time."""

    first_ms: int = 250
    max_ms: int = 5_000
    deadline_ms: int = 600_000


_SETTLED = {Verification.CONFIRMED_SUCCESS: "confirmed_success",
            Verification.CONFIRMED_FAILURE: "confirmed_failure",
            Verification.INCONCLUSIVE: "inconclusive"}


def after_verify(outcome: LookupOutcome, call: ToolCallState, progress: Progress,
                 policy: VerifyPolicy, now_ms: int) -> Step:
    """Verification: report a settled status; while pending poll again, until the deadline."""
    done = progress.model_copy(update={"phase": "done"})
    if isinstance(outcome, FoundCompleted) and outcome.verification in _SETTLED:
        return Step([_verification(call, _SETTLED[outcome.verification], outcome.result_ref)], done)
    if isinstance(outcome, FoundFailed):
        return Step([_verification(call, "confirmed_failure", outcome.code)], done)
    if isinstance(outcome, NotFound):
        return Step([_verification(call, "inconclusive", "provider_has_no_record")], done)
    progress = progress.model_copy(update={"lookups": progress.lookups + 1})
    wake = now_ms + min(policy.max_ms, policy.first_ms * 2 ** min(progress.lookups, 20))
    if wake >= progress.deadlineMs:
        return Step([_verification(call, "inconclusive", "verification_deadline")], done)
    return Step([], progress, wake)


def verify_wake(progress: Progress, policy: VerifyPolicy, now_ms: int) -> tuple[Progress, int]:
    """Start polling a completed call's verification: the first poll after `first_ms`."""
    started = begin_lookups(progress, "verifying", now_ms + policy.deadline_ms)
    return started, now_ms + policy.first_ms


def after_cancel(cancelled: bool, found: LookupOutcome | None, call: ToolCallState,
                 progress: Progress, *, result_cap: int = RESULT_MAX_BYTES) -> Step:
    """A dispatching call waiting to retry when its run is cancelled: report what is true."""
    done = progress.model_copy(update={"phase": "idle"})
    if cancelled:
        return Step([failed_draft(call, "cancelled", False, "cancelled at the provider")], done)
    too_large = oversize(call, found.result, result_cap) if isinstance(found, FoundCompleted) else None
    if too_large is not None:
        return Step([failed_draft(call, "result_too_large", False, too_large)], done)
    if isinstance(found, FoundCompleted):
        return Step([_completed_draft(call, found)], done)  # too late to cancel
    if isinstance(found, FoundFailed):
        return Step([failed_draft(call, found.error_class.value, False, found.detail)], done)
    if isinstance(found, NotFound):
        message = "cancelled before the provider received the request"
        return Step([failed_draft(call, "cancelled", False, message)], done)
    reason = found.reason if isinstance(found, LookupUnknown) else "no lookup"
    return Step([unknown_draft(call, f"cancel requested; outcome unknown: {reason}")], done)
