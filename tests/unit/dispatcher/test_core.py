"""The dispatcher's pure core: work per event, outcomes -> commands, epochs; and its helpers."""

from __future__ import annotations

from pathlib import Path

import pytest
from decider_support import CTX, approved_refund, claim, dispatched_refund, unknown

from runfacts.connectors.args_store import ArgsStore
from runfacts.processors.dispatcher import core
from runfacts.processors.dispatcher.adapters import (
    ArgsMissing,
    ArgsTampered,
    FoundCompleted,
    FoundFailed,
    LookupUnknown,
    NotFound,
    ToolCompleted,
    ToolFailed,
    ToolUnknown,
    Verification,
)
from runfacts.processors.dispatcher.incarnation import next_incarnation
from runfacts.processors.policy.retry import ErrorClass
from runfacts.schemas.errors import ConfigError

POLICY = CTX.capabilities.get("payments.refund").retry
FOUND = FoundCompleted(result_ref="re_1", result_hash="h", provider_status="succeeded",
                       verification=Verification.CONFIRMED_SUCCESS)


def _dispatched(epoch: int) -> tuple[object, object]:
    s = approved_refund().given(claim(epoch=epoch))
    return s.log[-3], s.s


def _progress(**kw: object) -> core.Progress:
    return core.Progress(toolCallId="tool-call-031", correlationId="c", **kw)


def test_work_is_execute_when_the_dispatching_epoch_is_this_incarnations() -> None:
    event, run = _dispatched(core.lease_epoch(7, 1))
    assert [type(w).__name__ for w in core.work_for(event, run, 7)] == ["Execute"]


def test_work_is_report_lost_when_the_dispatching_epoch_is_another_incarnations() -> None:
    event, run = _dispatched(core.lease_epoch(7, 1))
    (work,) = core.work_for(event, run, 8)
    assert isinstance(work, core.ReportLost) and "incarnation 7" in work.why


def test_work_is_claim_when_a_call_is_authorized() -> None:
    s = approved_refund()
    authorized = next(e for e in s.log if e.eventType == "tool.call.authorized")
    (work,) = core.work_for(authorized, s.s, 1)
    draft = core.claim_draft(work.call, 5)
    assert draft.payload.leaseEpoch == 5_001 and draft.payload.externalRequestId == "tool-call-031-a1"


def test_claim_draft_is_none_when_the_incarnation_is_behind_the_calls_epoch() -> None:
    s = dispatched_refund().given(unknown())
    call = s.s.toolCalls["tool-call-031"].model_copy(update={"leaseEpoch": core.lease_epoch(9, 1)})
    assert core.claim_draft(call, 8) is None
    assert core.claim_draft(call, 9).payload.leaseEpoch == core.lease_epoch(9, 2)


def test_lease_epochs_grow_with_incarnation_then_attempt_when_derived() -> None:
    epochs = [core.lease_epoch(i, a) for i in (1, 2) for a in (1, 2, 999)]
    assert epochs == sorted(epochs) and len(set(epochs)) == 6
    assert {core.incarnation_of(e) for e in epochs[:3]} == {1}
    with pytest.raises(ValueError, match="attempt=1000"):
        core.lease_epoch(1, 1_000)


def test_after_execute_reports_unknown_when_the_provider_fences_the_epoch() -> None:
    call = dispatched_refund().s.toolCalls["tool-call-031"]
    fenced = ToolFailed.of(ErrorClass.FENCED, "stale_epoch", http_status=409)
    step = core.after_execute(fenced, call, core.start_try(_progress(), call, 0), POLICY, 0)
    assert [d.command.__name__ for d in step.drafts] == ["ReportResultUnknown"]


@pytest.mark.parametrize("outcome, expected", [
    (ToolCompleted(result_ref="re_1", result_hash="h", provider_status="pending",
                   verification=Verification.PENDING), "ReportToolCompleted"),
    (ToolUnknown(reason="read timeout"), "ReportResultUnknown"),
    (ToolFailed.of(ErrorClass.VALIDATION, "invalid"), "ReportToolFailed"),
])
def test_after_execute_reports_at_once_when_the_outcome_is_final(outcome: object, expected: str) -> None:
    call = dispatched_refund().s.toolCalls["tool-call-031"]
    step = core.after_execute(outcome, call, core.start_try(_progress(), call, 0), POLICY, 0)
    assert [d.command.__name__ for d in step.drafts] == [expected] and step.wake_at_ms is None


def test_after_execute_gives_up_retryable_when_the_retry_would_pass_the_deadline() -> None:
    call = dispatched_refund().s.toolCalls["tool-call-031"]
    progress = core.start_try(_progress(), call, 0)
    step = core.after_execute(ToolFailed.of(ErrorClass.RATE_LIMITED, "429", retry_after_ms=60_000),
                              call, progress, POLICY, 1_000)
    (failed,) = step.drafts
    assert failed.payload.retryable is True and "deadline" in failed.payload.message


@pytest.mark.parametrize("found, cancelled, expected", [
    (None, True, ("ReportToolFailed", "cancelled")),
    (FOUND, False, ("ReportToolCompleted", None)),
    (NotFound(), False, ("ReportToolFailed", "cancelled")),
    (FoundFailed(error_class=ErrorClass.REFUSED, code="declined"), False, ("ReportToolFailed", "refused")),
    (LookupUnknown(reason="timeout", retryable=True), False, ("ReportResultUnknown", None)),
])
def test_after_cancel_reports_what_the_provider_knows_when_a_waiting_call_is_cancelled(
        found: object, cancelled: bool, expected: tuple[str, str | None]) -> None:
    call = dispatched_refund().s.toolCalls["tool-call-031"]
    (draft,) = core.after_cancel(cancelled, found, call, _progress()).drafts
    assert (draft.command.__name__, getattr(draft.payload, "errorClass", None)) == expected


@pytest.mark.parametrize("outcome, status", [
    (FOUND, "confirmed_success"),
    (FoundFailed(error_class=ErrorClass.REFUSED, code="declined"), "confirmed_failure"),
    (NotFound(), "inconclusive"),
])
def test_after_verify_reports_a_settled_status_when_the_provider_knows_it(outcome: object, status: str) -> None:
    call = dispatched_refund().s.toolCalls["tool-call-031"]
    (draft,) = core.after_verify(outcome, call, _progress(deadlineMs=10_000), core.VerifyPolicy(), 0).drafts
    assert draft.payload.status == status


def test_after_verify_polls_again_then_gives_up_inconclusive_when_the_refund_stays_pending() -> None:
    call = dispatched_refund().s.toolCalls["tool-call-031"]
    pending = FOUND.model_copy(update={"verification": Verification.PENDING})
    policy = core.VerifyPolicy(first_ms=100, max_ms=400, deadline_ms=1_000)
    progress, wake = core.verify_wake(_progress(), policy, 0)
    step = core.after_verify(pending, call, progress, policy, wake)
    assert step.drafts == [] and step.wake_at_ms == wake + 200
    late = core.after_verify(pending, call, step.progress, policy, 900)
    assert late.drafts[0].payload.status == "inconclusive" and late.wake_at_ms is None


def test_next_incarnation_grows_when_the_clock_steps_back(tmp_path: Path) -> None:
    path = tmp_path / "d" / "incarnation"
    first = next_incarnation(path, 5_000)
    assert (first, next_incarnation(path, 4_000), next_incarnation(path, 9_000)) == (5_000, 5_001, 9_000)
    path.write_text("garbage")
    with pytest.raises(ConfigError, match="incarnation file"):
        next_incarnation(path, 1)


def test_args_store_returns_arguments_when_their_hash_matches(tmp_path: Path) -> None:
    store = ArgsStore.open(tmp_path / "a.db")
    stored = store.put({"b": 1, "a": [1, 2]})
    assert stored.ref == f"args-{stored.hash}" and store.put({"a": [1, 2], "b": 1}) == stored
    assert store.load_verified(stored.ref, stored.hash) == {"a": [1, 2], "b": 1}
    with pytest.raises(ConfigError, match="other arguments"):
        store.put({"c": 3}, ref=stored.ref)


def test_args_store_raises_when_arguments_are_missing_or_altered(tmp_path: Path) -> None:
    store = ArgsStore.open(tmp_path / "a.db")
    stored = store.put({"amountMinor": 1}, ref="args/x")
    store.conn.execute("UPDATE runfacts_args SET body = '{\"amountMinor\":2}'")
    with pytest.raises(ArgsTampered, match="args/x"):
        store.load_verified(stored.ref, stored.hash)
    with pytest.raises(ArgsMissing, match="args/y"):
        store.get("args/y")


def test_rate_limited_tries_wait_as_told_and_do_not_count_toward_max_attempts() -> None:
    call = dispatched_refund().s.toolCalls["tool-call-031"]  # the refund's policy: 3 attempts within 30 s
    progress, now = _progress(), 0
    for throttle in range(1, 6):  # five 429s: more than maxAttempts, none of them an attempt
        progress = core.start_try(progress, call, now)
        step = core.after_execute(ToolFailed.of(ErrorClass.RATE_LIMITED, "429", retry_after_ms=1_000),
                                  call, progress, POLICY, now)
        assert step.drafts == [] and step.wake_at_ms == now + 1_000  # Retry-After, exactly
        progress, now = step.progress, now + 1_000
        assert (progress.phase, progress.throttles, progress.tries) == ("retry_wait", throttle, throttle)
    for _ in range(2):  # then two real failures: attempts 1 and 2 of 3, retried
        progress = core.start_try(progress, call, now)
        step = core.after_execute(ToolFailed.of(ErrorClass.TRANSIENT, "503"), call, progress, POLICY, now)
        assert step.drafts == [] and step.wake_at_ms is not None
        progress, now = step.progress, step.wake_at_ms
    progress = core.start_try(progress, call, now)  # the third counted attempt fails: the policy is spent
    (failed,) = core.after_execute(ToolFailed.of(ErrorClass.TRANSIENT, "503"), call, progress, POLICY, now).drafts
    assert (failed.payload.errorClass, failed.payload.retryable) == ("transient", True)
    assert "after 3 attempts" in failed.payload.message


def test_rate_limited_without_retry_after_backs_off_per_policy_within_the_deadline() -> None:
    call = dispatched_refund().s.toolCalls["tool-call-031"]
    progress = core.start_try(_progress(), call, 0)
    step = core.after_execute(ToolFailed.of(ErrorClass.RATE_LIMITED, "429"), call, progress, POLICY, 0)
    assert step.drafts == [] and 100 <= (step.wake_at_ms or 0) <= 200  # backoff 1: in [base/2, base]
    late = core.start_try(step.progress, call, 29_950)
    (failed,) = core.after_execute(ToolFailed.of(ErrorClass.RATE_LIMITED, "429", retry_after_ms=5_000),
                                   call, late, POLICY, 29_950).drafts
    assert (failed.payload.errorClass, failed.payload.retryable) == ("rate_limited", True)
    assert "rate limited 2 time(s)" in failed.payload.message and "deadline" in failed.payload.message
