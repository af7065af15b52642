"""A grant used after its run ended is refused by the dispatcher with a typed reason."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime, timedelta
from pathlib import Path

import pytest
from decider_support import approved_refund, claim, command, dispatched_refund

from runfacts.processors.dispatcher import core
from runfacts.schemas import commands as cmd

from .dispatcher_support import POOLED, Loop


def _ms(at: datetime) -> int:
    return int(at.timestamp() * 1000)


def _fail() -> cmd.FailRun:
    return command(cmd.FailRun, errorClass="model_error", detail="")


def test_refusal_is_grant_revoked_when_the_run_ended_and_revoked_the_lease() -> None:
    s = dispatched_refund().given(_fail())
    refused = core.refusal(s.s.toolCalls["tool-call-031"], s.s, _ms(s.s.updatedAt))
    assert refused is not None and refused.reason == "grant_revoked" and "tool-call-031" in refused.detail


def test_refusal_is_run_ended_when_the_revocation_is_not_folded_yet() -> None:
    s = dispatched_refund()
    ended = s.s.model_copy(update={"status": "failed"})
    refused = core.refusal(ended.toolCalls["tool-call-031"], ended, _ms(s.s.updatedAt))
    assert refused is not None and refused.reason == "run_ended"


def test_refusal_is_grant_expired_when_the_approval_lapsed_and_the_run_is_live() -> None:
    s = approved_refund()
    late = s.s.approvals["approval-tool-call-031"].expiresAt + timedelta(milliseconds=1)
    refused = core.refusal(s.s.toolCalls["tool-call-031"], s.s, _ms(late))
    assert refused is not None and refused.reason == "grant_expired"


def test_no_refusal_when_the_grant_is_live() -> None:
    s = approved_refund()
    assert core.refusal(s.s.toolCalls["tool-call-031"], s.s, _ms(s.s.updatedAt)) is None


def test_refused_retry_reports_the_call_failed_not_retryable_with_the_reason() -> None:
    s = dispatched_refund().given(_fail())
    call = s.s.toolCalls["tool-call-031"]
    d = core.refused_draft(call, core.refusal(call, s.s, _ms(s.s.updatedAt)))
    assert (d.command, d.payload.errorClass, d.payload.retryable) == (cmd.ReportToolFailed, "grant_revoked", False)


def test_claim_of_a_revoked_call_is_never_drafted_when_the_revocation_event_arrives() -> None:
    s = approved_refund().given(command(cmd.CompleteRun, outcomeRef="o"))
    revoked = next(e for e in s.log if e.eventType == "grant.revoked")
    assert core.work_for(revoked, s.s, 1) == []
    assert claim().payload.toolCallId == revoked.payload.toolCallId


@pytest.fixture(params=[False, True], ids=["in-transaction", "pooled"])
def loop(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Loop]:
    POOLED["on"] = request.param
    loop = Loop(tmp_path)
    yield loop
    loop.close()
    POOLED["on"] = False


def test_dispatcher_refuses_the_retry_when_the_run_failed_while_the_call_waited_to_retry(loop: Loop) -> None:
    loop.sim.set_faults(errorNext=1, errorStatus=503)
    loop.start_refund()
    assert loop.call().execution == "dispatching"  # its first try failed retryable: a retry is due
    loop.send(loop.at(cmd.FailRun, errorClass="model_error", detail="agent gave up"))
    assert "grant.revoked" in loop.types()
    loop.advance(10_000)  # the retry falls due after the run ended
    call = loop.call()
    assert (call.execution, call.errorClass, call.retryable) == ("failed", "grant_revoked", False)
    assert len(loop.adapter.executed) == 1 and loop.sim.ledger() == []
