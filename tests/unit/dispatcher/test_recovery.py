"""Unknown outcomes, crashes and lease epochs, every reconciliation outcome, cancellation."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from decider_support import REFUND_HASH, USER

from runfacts.processors.dispatcher.core import incarnation_of
from runfacts.schemas import commands as cmd

from .dispatcher_support import CALL, POOLED, Loop, SimulatedCrash

AFTER_CALL = "dispatcher.after_call_before_record"
AFTER_RECORD = "dispatcher.after_record_before_commit"


@pytest.fixture(autouse=True, params=[False, True], ids=["in-transaction", "pooled"])
def pooled(request: pytest.FixtureRequest) -> Iterator[bool]:
    """Every test twice: tool calls inside the engine transaction, and off it (ToolPool)."""
    POOLED["on"] = request.param
    yield request.param
    POOLED["on"] = False


@pytest.fixture
def loop(tmp_path: Path) -> Iterator[Loop]:
    loop = Loop(tmp_path)
    yield loop
    loop.close()


def _reconciled(loop: Loop) -> list[str]:
    return [e.payload.outcome for e in loop.events() if e.eventType == "tool.call.reconciled"]


def _crashed_after_call(tmp_path: Path, point: str = AFTER_CALL, **kw: object) -> Loop:
    """A run whose first dispatcher died at `point` during the refund call, then restarted."""
    loop = Loop(tmp_path, crash_at=point, **kw)
    loop.start_refund(approve=False)
    with pytest.raises(SimulatedCrash):
        loop.approve(REFUND_HASH)
    loop.restart_dispatcher(incarnation=2_000)
    return loop


def test_lost_response_becomes_result_unknown_then_found_completed_when_the_provider_drops_it(
        loop: Loop) -> None:
    loop.sim.set_faults(acceptThenDropNext=1)
    loop.start_refund()
    types = loop.types()
    assert types.index("tool.call.result_unknown") < types.index("tool.call.reconciled")
    assert _reconciled(loop) == ["found_completed"]
    call = loop.call()
    assert (call.execution, call.verification, call.attempts) == ("completed", "pending", 1)
    assert len(loop.adapter.executed) == 1 and len(loop.sim.ledger()) == 1


@pytest.mark.parametrize("point", [AFTER_CALL, AFTER_RECORD])
def test_restarted_dispatcher_reconciles_instead_of_calling_when_killed_at_crash_point(
        tmp_path: Path, point: str) -> None:
    loop = _crashed_after_call(tmp_path, point)
    try:
        loop.settle()
        assert len(loop.sim.ledger()) == 1  # the dead incarnation's call executed
        assert loop.adapter.executed == []  # the new one never called again
        unknown = next(e for e in loop.events() if e.eventType == "tool.call.result_unknown")
        assert "incarnation 1000" in unknown.payload.lastError
        assert _reconciled(loop) == ["found_completed"] and loop.call().execution == "completed"
    finally:
        loop.close()


def test_reconciliation_reports_found_failed_when_the_lost_request_was_declined(tmp_path: Path) -> None:
    loop = _crashed_after_call(tmp_path, max_amount_minor=1_000)
    try:
        loop.settle()
        assert _reconciled(loop) == ["found_failed"]
        assert loop.call().execution == "failed" and loop.sim.ledger() == []
    finally:
        loop.close()


def test_not_found_claims_again_with_the_same_key_when_the_claimer_died_before_calling(loop: Loop) -> None:
    loop.start_refund(approve=False)
    loop.pipe(loop.approval(REFUND_HASH))
    loop.step()  # the dispatcher's claim is committed and decided: dispatching ...
    assert loop.call().execution == "dispatching"
    loop.restart_dispatcher(incarnation=2_000)  # ... but its claimer died before calling
    loop.settle()
    assert _reconciled(loop) == ["not_found"]
    first, second = [c.payload for c in loop.commands() if c.commandType == "tool.call.claim"]
    assert first.idempotencyKey == second.idempotencyKey
    assert (second.attempt, second.externalRequestId) == (2, f"{CALL}-a2")
    assert incarnation_of(second.leaseEpoch) == 2_000 and second.leaseEpoch > first.leaseEpoch
    ledger = loop.sim.ledger()
    assert len(ledger) == 1 and ledger[0].external_request_ids == (f"{CALL}-a2",)
    assert loop.call().execution == "completed"


def test_reconciliation_asks_again_with_backoff_while_the_provider_cannot_answer(tmp_path: Path) -> None:
    loop = Loop(tmp_path, read_timeout_ms=100)
    try:
        loop.sim.set_faults(acceptThenDropNext=1, latencyMs=400)
        loop.start_refund()
        assert _reconciled(loop) == ["still_unknown"] and loop.call().execution == "result_unknown"
        loop.advance(200)
        assert _reconciled(loop) == ["still_unknown"]  # reported once, asked again quietly
        loop.sim.set_faults(latencyMs=0)
        loop.advance(1_000)
        assert _reconciled(loop) == ["still_unknown", "found_completed"]
        assert loop.call().execution == "completed" and len(loop.sim.ledger()) == 1
    finally:
        loop.close()


def test_run_needs_review_when_the_outcome_stays_unknown_past_the_deadline(tmp_path: Path) -> None:
    loop = Loop(tmp_path, read_timeout_ms=50)
    try:
        loop.sim.set_faults(acceptThenDropNext=1, latencyMs=300)
        loop.start_refund()
        lookups = loop.adapter.lookups
        loop.advance(600_000)
        assert loop.status() == "needs_review"
        review = next(e for e in loop.events() if e.eventType == "run.needs_review")
        assert review.payload.reason == "unresolved_side_effect"
        after = loop.adapter.lookups
        loop.advance(600_000)
        assert lookups < after == loop.adapter.lookups  # it asked until the deadline, then stopped
        assert loop.call().execution == "result_unknown" and loop.adapter.executed[1:] == []
    finally:
        loop.close()


def test_cancel_reports_cancelled_when_the_call_waits_to_retry(loop: Loop) -> None:
    loop.sim.set_faults(errorNext=1, errorStatus=503)
    loop.start_refund()
    assert loop.call().execution == "dispatching"
    loop.send(loop.at(cmd.CancelRun, USER, reason="customer withdrew"))
    call = loop.call()
    assert (call.execution, call.errorClass, call.retryable) == ("failed", "cancelled", False)
    assert loop.types()[-3:] == ["run.cancelled", "checkpoint.saved", "checkpoint.archived"]
    loop.advance(10_000)
    assert len(loop.adapter.executed) == 1 and loop.sim.ledger() == []


def test_cancel_cancels_the_refund_at_the_provider_when_the_call_is_result_unknown(tmp_path: Path) -> None:
    loop = Loop(tmp_path, read_timeout_ms=100)
    try:
        loop.sim.set_faults(acceptThenDropNext=1, latencyMs=400, pending=True)
        loop.start_refund()
        assert loop.call().execution == "result_unknown"
        loop.sim.set_faults(latencyMs=0)
        loop.send(loop.at(cmd.CancelRun, USER, reason="customer withdrew"))
        assert loop.adapter.cancels == 1 and loop.sim.ledger()[0].status == "canceled"
        assert _reconciled(loop) == ["still_unknown", "found_completed"]
        loop.advance(1_000)
        assert loop.call().verification == "confirmed_failure"
        assert loop.status() == "cancelled"
    finally:
        loop.close()


def test_cancel_leaves_a_completed_refund_alone_when_it_was_too_late(loop: Loop) -> None:
    loop.start_refund()
    loop.send(loop.at(cmd.CancelRun, USER, reason="too late"))
    assert loop.status() == "cancelled" and loop.adapter.cancels == 0
    assert loop.call().execution == "completed" and len(loop.sim.ledger()) == 1


def test_fresh_dispatcher_replaying_the_log_calls_nothing_when_every_call_settled(loop: Loop) -> None:
    loop.sim.set_faults(acceptThenDropNext=1)
    loop.start_refund()
    loop.send(loop.at(cmd.CancelRun, USER, reason="done"))
    version, before = loop.call(), len(loop.events())
    loop.dispatcher = loop._dispatcher(3_000, "")  # a new consumer group: empty stores, offset 0
    loop.events_seen = loop.commands_seen = 0
    loop.settle()
    assert loop.adapter.executed == [] and loop.adapter.cancels == 0
    # its commands carry the ids the first dispatcher used (derived from the input positions):
    # the decider deduplicates them, so the replay changes nothing
    assert {e.eventType for e in loop.events()[before:]} <= {"command.rejected"}
    assert loop.call() == version and loop.status() == "cancelled"
