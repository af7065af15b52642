"""An authorized call no dispatcher claims within `claimWithinMs` moves the run to needs_review
(reason unclaimed_tool_call, detail naming the capability): issue 15 item 3."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta

from decider_support import (  # noqa: I001
    CTX,
    Scenario,
    approved_refund,
    claim,
    command,
    create,
    dispatched_refund,
    propose_lookup,
    reconciled,
    timer,
    unknown,
)

from runfacts.processors.decider.timers import wanted_timers
from runfacts.processors.policy.capabilities import parse_capabilities
from runfacts.projections.user_view import user_view
from runfacts.schemas import commands as cmd

CATALOG = CTX.capabilities
DEFAULT_MS = 600_000


def _due(s: Scenario, call: str = "tool-call-031"):  # noqa: ANN202
    spec = wanted_timers(s.s, CATALOG)[f"claim:{call}"]
    assert spec.kind == "claim_deadline" and spec.target_id == call
    return spec.due


def test_claim_deadline_moves_run_to_needs_review_naming_the_capability_when_nobody_claims() -> None:
    s = approved_refund()
    due = _due(s)
    assert due == s.s.toolCalls["tool-call-031"].claimableSince + timedelta(milliseconds=DEFAULT_MS)
    s.when(timer("claim_deadline", "tool-call-031", due)).then("run.needs_review")
    review = s.event("run.needs_review")
    assert review.payload.reason == "unclaimed_tool_call" and review.capabilityId == "payments.refund"
    assert "payments.refund" in review.payload.detail and "tool-call-031" in review.payload.detail
    assert (s.s.status, s.s.statusReason) == ("needs_review", "unclaimed_tool_call")
    assert "claim:tool-call-031" not in wanted_timers(s.s, CATALOG)
    s.when(claim(at=due + timedelta(seconds=1))).rejected("run_not_active")


def test_claim_deadline_is_a_no_op_when_the_call_was_claimed_in_time() -> None:
    s = approved_refund()
    due = _due(s)
    s.given(claim())
    assert "claim:tool-call-031" not in wanted_timers(s.s, CATALOG)
    assert s.when(timer("claim_deadline", "tool-call-031", due)).last == []


def test_claim_deadline_is_a_no_op_when_the_timer_fires_early() -> None:
    s = approved_refund()
    early = _due(s) - timedelta(seconds=1)
    assert s.when(timer("claim_deadline", "tool-call-031", early)).last == []


def test_claim_deadline_uses_the_manifests_claim_within_when_set() -> None:
    manifest = parse_capabilities('''
[[capability]]
capabilityId = "orders.lookup"
risk = "low"
requiredRole = "agent"
needsApproval = false
reconciliationDeadlineMs = 1000
claimWithinMs = 2000
[capability.retry]
maxAttempts = 1
baseBackoffMs = 1
maxBackoffMs = 1
deadlineMs = 1
''')
    assert manifest.get("orders.lookup").claim_within_ms == 2_000
    ctx = replace(CTX, capabilities=manifest)
    s = Scenario(ctx).given(create(), propose_lookup())
    spec = wanted_timers(s.s, manifest)["claim:tool-call-010"]
    assert spec.due == s.s.toolCalls["tool-call-010"].claimableSince + timedelta(milliseconds=2_000)
    s.when(timer("claim_deadline", "tool-call-010", spec.due)).then("run.needs_review")
    assert "orders.lookup" in s.event("run.needs_review").payload.detail


def test_claim_deadline_restarts_when_a_not_found_call_waits_for_its_redispatch() -> None:
    s = dispatched_refund().given(unknown())
    assert "claim:tool-call-031" not in wanted_timers(s.s, CATALOG)  # in flight
    s.given(reconciled("not_found"))
    since = s.s.toolCalls["tool-call-031"].claimableSince
    assert _due(s) == since + timedelta(milliseconds=DEFAULT_MS)


def test_user_view_shows_the_unclaimed_call_reason_when_the_deadline_passed() -> None:
    s = approved_refund()
    s.given(timer("claim_deadline", "tool-call-031", _due(s)))
    view = user_view(s.s)
    assert view is not None
    assert view.statusLine == ("Needs a person: unclaimed_tool_call "
                               "(payments.refund not claimed by a dispatcher)")


def test_no_claim_deadline_while_the_run_waits_for_a_person() -> None:
    s = approved_refund().given(command(cmd.StopRun, reason="enough"))
    assert "claim:tool-call-031" not in wanted_timers(s.s, CATALOG)
