"""Issue 15 item 2 end to end (decider + dispatcher drivers, simulator on loopback): a grant
that expired while the dispatcher was down never executes; the run pauses for a new approval.
Also item 3 through the decider shell: an authorized call nobody claims goes to needs_review."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest
from decider_support import CTX, MANIFEST, REFUND_HASH

from runfacts.processors.policy.capabilities import parse_capabilities

from .dispatcher_support import Loop

TTL_MS = 900_000  # decider_support's approvalTtlMs for payments.refund
PAST_EXPIRY_MS = TTL_MS + 19_000
# a claim deadline past the expiry, so the expiry is what the run meets (not unclaimed_tool_call)
LATE_CLAIM = replace(CTX, capabilities=parse_capabilities(
    MANIFEST.replace("approvalTtlMs = 900000", "approvalTtlMs = 900000\nclaimWithinMs = 3600000", 1)))


@pytest.fixture
def loop(tmp_path: Path) -> Iterator[Loop]:
    loop = Loop(tmp_path, ctx=LATE_CLAIM)
    yield loop
    loop.close()


def _claims(loop: Loop) -> list[int]:
    return [c.payload.attempt for c in loop.commands() if c.commandType == "tool.call.claim"]


def _paused_for_reauthorization(loop: Loop) -> None:
    assert loop.status() == "waiting_for_review"
    assert loop.call().closedReason == "approval_expired"
    assert loop.sim.ledger() == []  # no refund on the old grant


def test_no_claim_and_run_paused_when_grant_expired_before_the_dispatcher_came_back(loop: Loop) -> None:
    loop.start_refund(approve=False)
    loop.pipe(loop.approval(REFUND_HASH))  # granted + authorized; the dispatcher is down
    loop.restart_dispatcher(incarnation=2_000)
    loop.decider.advance(PAST_EXPIRY_MS)  # the expiry passes during recovery
    loop.dispatcher.advance(PAST_EXPIRY_MS)
    loop.settle()  # the new dispatcher reads tool.call.authorized 19 s after the expiry
    assert _claims(loop) == []
    assert "approval.expired" in loop.types() and loop.types()[-1] == "run.paused"
    _paused_for_reauthorization(loop)
    assert loop.adapter.executed == []


def test_no_second_attempt_when_not_found_arrives_after_the_grant_expired(loop: Loop) -> None:
    loop.sim.set_faults(errorNext=1, errorStatus=503)
    loop.start_refund()  # attempt 1 answered 503: a retry is armed in the dispatcher's store
    assert loop.call().execution == "dispatching" and _claims(loop) == [1]
    loop.restart_dispatcher(incarnation=2_000)  # the dispatcher died waiting to retry
    loop.advance(PAST_EXPIRY_MS)  # its restored timer: result_unknown -> lookup -> not_found
    outcomes = [e.payload.outcome for e in loop.events() if e.eventType == "tool.call.reconciled"]
    assert outcomes == ["not_found"]
    assert _claims(loop) == [1]  # attempt 2 is never claimed on the expired grant
    _paused_for_reauthorization(loop)
    assert loop.adapter.executed == []
    assert [e.eventType for e in loop.events()][-2:] == ["approval.expired", "run.paused"]


def test_run_needs_review_naming_the_capability_when_no_dispatcher_claims_within_claim_within(
        tmp_path: Path) -> None:
    loop = Loop(tmp_path)  # decider_support's manifest: claimWithinMs defaults to 600000
    try:
        loop.start_refund(approve=False)
        loop.pipe(loop.approval(REFUND_HASH))  # authorized; no dispatcher reads it
        loop.decider.advance(599_000)
        assert loop.status() == "running"
        loop.decider.advance(1_000)  # the decider shell's claim:<toolCallId> timer falls due
        assert loop.status() == "needs_review"
        review = [e for e in loop.events() if e.eventType == "run.needs_review"]
        assert [(e.payload.reason, e.capabilityId) for e in review] == [("unclaimed_tool_call", "payments.refund")]
    finally:
        loop.close()
