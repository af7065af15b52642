"""Unknown unless proven (SEMANTICS.md §14), pure parts: a read-only or idempotent call is run
again instead of reconciled (dispatcher core invariant 5), and an unknown outcome of a tool
without a lookup goes to a person at once (the decider)."""

from __future__ import annotations

from dataclasses import replace

from decider_support import CTX, MANIFEST, Scenario, approved_refund, claim, dispatched_refund, reconciled, unknown

from runfacts.processors.dispatcher import core
from runfacts.processors.dispatcher.adapters import LookupUnknown, ToolUnknown
from runfacts.processors.policy.capabilities import parse_capabilities

POLICY = CTX.capabilities.get("payments.refund").retry
REFUND = frozenset({"payments.refund"})


def _progress(**kw: object) -> core.Progress:
    return core.Progress(toolCallId="tool-call-031", correlationId="c", **kw)


def test_work_is_execute_when_a_rerunnable_call_was_dispatched_by_another_incarnation() -> None:
    s = approved_refund().given(claim(epoch=core.lease_epoch(7, 1)))
    event = s.log[-3]
    assert [type(w).__name__ for w in core.work_for(event, s.s, 8)] == ["ReportLost"]
    assert [type(w).__name__ for w in core.work_for(event, s.s, 8, REFUND)] == ["Execute"]


def test_after_execute_retries_an_unknown_outcome_when_the_call_reruns_safely() -> None:
    call = dispatched_refund().s.toolCalls["tool-call-031"]
    progress = core.start_try(_progress(), call, 0)
    lost = ToolUnknown(reason="tool raised ConnectionResetError")
    unsafe = core.after_execute(lost, call, progress, POLICY, 0)
    safe = core.after_execute(lost, call, progress, POLICY, 0, reruns=True)
    assert [d.command.__name__ for d in unsafe.drafts] == ["ReportResultUnknown"]
    assert safe.drafts == [] and safe.progress.phase == "retry_wait" and safe.wake_at_ms is not None


def test_after_execute_fails_retryably_when_a_rerunnable_call_used_its_tries() -> None:
    call = dispatched_refund().s.toolCalls["tool-call-031"]
    progress = _progress(attempt=1, tries=POLICY.max_attempts)
    step = core.after_execute(ToolUnknown(reason="reset"), call, progress, POLICY, 0, reruns=True)
    (failed,) = step.drafts
    assert failed.command.__name__ == "ReportToolFailed"
    assert (failed.payload.errorClass, failed.payload.retryable) == ("transient", True)


def test_after_lookup_reports_not_found_when_a_rerunnable_call_cannot_be_looked_up() -> None:
    call = dispatched_refund().given(unknown()).s.toolCalls["tool-call-031"]
    cannot = LookupUnknown(reason="tool has no lookup", retryable=False)
    unsafe = core.after_lookup(cannot, call, _progress(), POLICY, 0)
    safe = core.after_lookup(cannot, call, _progress(), POLICY, 0, reruns=True)
    assert [d.payload.outcome for d in unsafe.drafts] == ["still_unknown"]
    assert [d.payload.outcome for d in safe.drafts] == ["not_found"]


def test_rerun_lost_runs_again_until_the_policy_attempts_are_used() -> None:
    call = dispatched_refund().s.toolCalls["tool-call-031"]
    assert core.rerun_lost(call, _progress(tries=1), POLICY, "lost") is None
    failed = core.rerun_lost(call, _progress(tries=POLICY.max_attempts), POLICY, "lost")
    assert failed is not None and failed.payload.retryable and "lost 3 times" in failed.payload.message


def _without_lookup() -> Scenario:
    manifest = MANIFEST.replace('approvalTtlMs = 900000', 'approvalTtlMs = 900000\nhasLookup = false')
    ctx = replace(CTX, capabilities=parse_capabilities(manifest))
    return Scenario(ctx)


def test_still_unknown_needs_review_at_once_when_the_tool_has_no_lookup() -> None:
    from decider_support import create, propose_refund, resume

    s = _without_lookup().given(create(), propose_refund(), resume(), claim(), unknown())
    s.when(reconciled("still_unknown")).then("tool.call.reconciled", "run.needs_review")
    assert (s.s.status, s.s.statusReason) == ("needs_review", "unresolved_side_effect")
    assert "no lookup" in s.event("run.needs_review").payload.detail


def test_still_unknown_waits_for_the_deadline_when_the_tool_has_a_lookup() -> None:
    s = dispatched_refund().given(unknown())
    s.when(reconciled("still_unknown")).then("tool.call.reconciled")
    assert s.s.status == "running"
