"""The result value of a tool call travels on the log: report -> event, capped, redacted."""

from __future__ import annotations

from decider_support import CTX, dispatched_refund, reconciled, unknown
from decider_support import completed as completed_report

from runfacts.processors.dispatcher import core
from runfacts.processors.dispatcher.adapters import FoundCompleted, ToolCompleted, Verification
from runfacts.projections.audit import reducer as audit
from runfacts.projections.eventlog import EventReader
from runfacts.projections.facts import ReadSettings
from runfacts.schemas import codec
from runfacts.schemas.pii import MASK, pii_paths, redact

POLICY = CTX.capabilities.get("payments.refund").retry
VALUE = '{"refundId":"re_1","status":"succeeded"}'


def _call():
    return dispatched_refund().s.toolCalls["tool-call-031"]


def _progress() -> core.Progress:
    return core.Progress(toolCallId="tool-call-031", correlationId="c")


def test_completed_event_carries_the_result_value_when_the_report_has_one() -> None:
    s = dispatched_refund().when(completed_report(result=VALUE))
    s.then("tool.call.completed", "verification.updated")
    assert s.event("tool.call.completed").payload.result == VALUE
    call = s.s.toolCalls["tool-call-031"]
    assert call.resultRef == "refund-1" and "re_1" not in call.model_dump_json()


def test_completed_event_result_is_null_when_the_tool_gave_none() -> None:
    s = dispatched_refund().when(completed_report())
    assert s.event("tool.call.completed").payload.result is None


def test_reconciled_event_carries_the_value_when_the_lookup_found_the_completed_call() -> None:
    s = dispatched_refund().given(unknown()).when(
        reconciled("found_completed", resultRef="refund-1", resultHash="h1", result=VALUE))
    assert s.event("tool.call.reconciled").payload.result == VALUE
    assert s.s.toolCalls["tool-call-031"].resultRef == "refund-1"


def test_after_execute_copies_the_value_into_the_report_when_under_the_cap() -> None:
    call = _call()
    done = ToolCompleted(result_ref="r", result_hash="h", provider_status="ok",
                         verification=Verification.CONFIRMED_SUCCESS, result=VALUE)
    (draft,) = core.after_execute(done, call, core.start_try(_progress(), call, 0), POLICY, 0).drafts
    assert draft.command.__name__ == "ReportToolCompleted" and draft.payload.result == VALUE


def test_after_execute_reports_result_too_large_naming_the_tool_when_over_the_cap() -> None:
    call = _call()
    big = ToolCompleted(result_ref="r", result_hash="h", provider_status="ok",
                        verification=Verification.CONFIRMED_SUCCESS, result='"' + "x" * 200 + '"')
    step = core.after_execute(big, call, core.start_try(_progress(), call, 0), POLICY, 0,
                              result_cap=100)
    (draft,) = step.drafts
    assert draft.command.__name__ == "ReportToolFailed"
    assert (draft.payload.errorClass, draft.payload.retryable) == ("result_too_large", False)
    assert "payments.refund" in draft.payload.message and "202 bytes" in draft.payload.message
    assert "RUNFACTS_TOOL_RESULT_MAX_BYTES" in draft.payload.message


def test_after_lookup_reports_the_value_when_found_completed() -> None:
    call = dispatched_refund().given(unknown()).s.toolCalls["tool-call-031"]
    found = FoundCompleted(result_ref="r", result_hash="h", provider_status="ok",
                           verification=Verification.CONFIRMED_SUCCESS, result=VALUE)
    (draft,) = core.after_lookup(found, call, _progress(), POLICY, 0).drafts
    assert (draft.payload.outcome, draft.payload.result) == ("found_completed", VALUE)


def test_after_lookup_reports_still_unknown_once_and_stops_when_the_value_is_over_the_cap() -> None:
    call = dispatched_refund().given(unknown()).s.toolCalls["tool-call-031"]
    found = FoundCompleted(result_ref="r", result_hash="h", provider_status="ok",
                           verification=Verification.CONFIRMED_SUCCESS, result="[" + "1," * 99 + "1]")
    step = core.after_lookup(found, call, _progress(), POLICY, 0, result_cap=50)
    (draft,) = step.drafts
    assert draft.payload.outcome == "still_unknown" and step.wake_at_ms is None


def test_result_is_personal_data_when_views_and_audit_read_the_completion() -> None:
    assert "payload.result" in pii_paths("tool.call.completed")
    assert "payload.result" in pii_paths("tool.call.reconciled")
    event = dispatched_refund().when(completed_report(result=VALUE)).event("tool.call.completed")
    assert redact(event).payload.result == MASK
    fact = EventReader(ReadSettings(decode=False)).fact(codec.encode(event), "runfacts.run.events", 0, 7)
    _, record = audit.link(None, fact, audit.summarize(fact))
    assert b"re_1" not in record and b"succeeded" not in record


def test_result_cap_reads_the_setting_and_names_it_when_the_value_is_bad() -> None:
    import pytest

    from runfacts.processors.dispatcher.app import result_cap
    from runfacts.schemas.errors import ConfigError

    assert result_cap({}) == core.RESULT_MAX_BYTES == 16_384
    assert result_cap({"RUNFACTS_TOOL_RESULT_MAX_BYTES": "100"}) == 100
    with pytest.raises(ConfigError, match="RUNFACTS_TOOL_RESULT_MAX_BYTES='16k'"):
        result_cap({"RUNFACTS_TOOL_RESULT_MAX_BYTES": "16k"})
