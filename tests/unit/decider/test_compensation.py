"""Compensation in the pure decider (issue 35): completed effects are undone newest first, each by
a governed call of its own; the run ends compensated, or needs_review when one cannot be undone."""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

from decider_support import (
    CTX,
    SUPPORT,
    USER,
    Scenario,
    command,
    create,
    report,
    tick,
)

from runfacts.processors.decider.commands.compensation import compensation_call_id
from runfacts.processors.policy.capabilities import parse_capabilities
from runfacts.processors.policy.compensation import INLINE, inline_arguments
from runfacts.processors.policy.display import render
from runfacts.processors.policy.retry import args_hash
from runfacts.schemas import commands as cmd
from runfacts.schemas.common import BudgetAmounts

RETRY = """[capability.retry]
maxAttempts = 3
baseBackoffMs = 100
maxBackoffMs = 1000
deadlineMs = 10000
"""
RESERVE_SCHEMA = {"type": "object", "properties": {"sku": {"type": "string"}, "qty": {"type": "integer"}},
                  "required": ["sku", "qty"]}
CHARGE_SCHEMA = {"type": "object", "properties": {"orderId": {"type": "string"},
                                                  "amountMinor": {"type": "integer"}},
                 "required": ["orderId", "amountMinor"]}
RELEASE_SCHEMA = {"type": "object", "properties": {"reservationId": {"type": "string"}, "qty": {"type": "integer"}},
                  "required": ["reservationId", "qty"]}
REFUND_SCHEMA = {"type": "object", "properties": {"chargeId": {"type": "string"}, "amountMinor": {"type": "integer"}},
                 "required": ["chargeId", "amountMinor"]}
MANIFEST = f"""
[[capability]]
capabilityId = "stock.reserve"
risk = "low"
requiredRole = "agent"
needsApproval = false
reconciliationDeadlineMs = 60000
argumentSchema = '{json.dumps(RESERVE_SCHEMA)}'
[capability.compensation]
capabilityId = "stock.release"
arguments = {{ reservationId = "result.reservation.id", qty = "args.qty" }}
{RETRY}
[[capability]]
capabilityId = "stock.release"
risk = "low"
requiredRole = "agent"
needsApproval = false
reconciliationDeadlineMs = 60000
argumentSchema = '{json.dumps(RELEASE_SCHEMA)}'
{RETRY}
[[capability]]
capabilityId = "payments.charge"
risk = "high"
requiredRole = "support_agent"
needsApproval = false
reconciliationDeadlineMs = 60000
argumentSchema = '{json.dumps(CHARGE_SCHEMA)}'
[capability.compensation]
capabilityId = "payments.refund_charge"
arguments = {{ chargeId = "result.chargeId", amountMinor = "args.amountMinor" }}
{RETRY}
[[capability]]
capabilityId = "payments.refund_charge"
risk = "high"
requiredRole = "support_agent"
needsApproval = {{approve}}
reconciliationDeadlineMs = 60000
argumentSchema = '{json.dumps(REFUND_SCHEMA)}'
{RETRY}"""
RESERVE = {"sku": "sku-9", "qty": 2}
CHARGE = {"orderId": "order-001", "amountMinor": 4200}


def ctx(approve: bool = False) -> Any:
    return replace(CTX, capabilities=parse_capabilities(MANIFEST.replace("{approve}", str(approve).lower())))


def propose(call: str, capability: str, arguments: dict[str, Any], schema: dict[str, Any]) -> cmd.ProposeToolCall:
    return command(cmd.ProposeToolCall, toolCallId=call, capabilityId=capability, argsHash=args_hash(arguments),
                   argsRef=f"args/{call}", target="order-001", action=capability.split(".")[1], risk="low",
                   summary=f"{capability} for order-001", display=render(arguments, schema))


def claim(s: Scenario, call: str, attempt: int = 1, epoch: int = 1) -> cmd.ClaimToolCall:
    from decider_support import DISPATCHER
    return command(cmd.ClaimToolCall, DISPATCHER, toolCallId=call, attempt=attempt,
                   idempotencyKey=s.s.toolCalls[call].idempotencyKey,
                   externalRequestId=f"payment-request-{call}-{attempt}", leaseEpoch=epoch)


def done(call: str, result: dict[str, Any] | None = None) -> cmd.ReportToolCompleted:
    return report(cmd.ReportToolCompleted, call, 1, resultRef=f"result-{call}", resultHash="h",
                  result=None if result is None else json.dumps(result))


def two_effects(approve: bool = False) -> Scenario:
    """A run that reserved stock, then charged the customer: two completed effects."""
    s = Scenario(ctx(approve)).given(create(BudgetAmounts(toolCalls=10, steps=50)),
                                     propose("reserve-1", "stock.reserve", RESERVE, RESERVE_SCHEMA))
    s.given(claim(s, "reserve-1"), done("reserve-1", {"reservation": {"id": "res-77"}}),
            propose("charge-1", "payments.charge", CHARGE, CHARGE_SCHEMA))
    return s.given(claim(s, "charge-1"), done("charge-1", {"chargeId": "ch-5"}))


def cancel() -> cmd.CancelRun:
    return command(cmd.CancelRun, USER, reason="user_requested")


def test_completed_call_plans_its_compensation_from_arguments_and_result() -> None:
    s = two_effects()
    plans = s.s.compensations
    assert list(plans) == ["reserve-1", "charge-1"]
    assert json.loads(plans["reserve-1"].arguments or "") == {"reservationId": "res-77", "qty": 2}
    assert json.loads(plans["charge-1"].arguments or "") == {"chargeId": "ch-5", "amountMinor": 4200}


def test_cancel_compensates_completed_effects_in_reverse_order_when_run_has_two() -> None:
    s = two_effects()
    s.when(cancel()).then("run.cancel_requested", "compensation.started", "tool.call.proposed",
                          "tool.call.authorized")
    started = s.event("compensation.started").payload
    assert (started.toolCallId, list(started.remaining)) == ("charge-1", ["reserve-1"])
    proposed = s.event("tool.call.proposed")
    first = compensation_call_id("charge-1")
    assert proposed.payload.toolCallId == first and proposed.capabilityId == "payments.refund_charge"
    assert proposed.payload.argsRef.startswith(INLINE)
    assert inline_arguments(proposed.payload.argsRef, proposed.payload.argsHash) == {
        "chargeId": "ch-5", "amountMinor": 4200}
    assert s.s.status == "compensating"
    # a governed call of its own: its own idempotency key, claimed and reported like any call
    assert s.s.toolCalls[first].idempotencyKey not in (s.s.toolCalls["charge-1"].idempotencyKey,
                                                      s.s.toolCalls["reserve-1"].idempotencyKey)
    s.given(claim(s, first)).when(done(first))
    assert [e.eventType for e in s.last][-3:] == ["compensation.started", "tool.call.proposed",
                                                  "tool.call.authorized"]
    assert s.event("compensation.started").payload.toolCallId == "reserve-1"
    second = compensation_call_id("reserve-1")
    s.given(claim(s, second)).when(done(second))
    ended = s.event("run.compensated").payload
    assert list(ended.compensatedToolCalls) == ["charge-1", "reserve-1"] and ended.reason == "run_cancelled"
    assert s.s.status == "compensated" and s.s.terminal
    assert "checkpoint.archived" in [e.eventType for e in s.last]


def test_compensation_waits_for_approval_when_its_manifest_asks() -> None:
    s = two_effects(approve=True)
    s.when(cancel()).then("run.cancel_requested", "compensation.started", "tool.call.proposed",
                          "approval.required")
    first = compensation_call_id("charge-1")
    assert s.s.status == "compensating"
    s.when(claim(s, first)).rejected("not_claimable")
    s.when(command(cmd.ResumeRun, SUPPORT, approvalId=f"approval-{first}", decision="approve",
                   argsHash=s.s.toolCalls[first].argsHash)).then("approval.granted", "tool.call.authorized")
    assert s.s.status == "compensating"
    s.given(claim(s, first)).when(done(first)).then(
        "tool.call.completed", "verification.updated", "compensation.started", "tool.call.proposed",
        "tool.call.authorized")


def test_rejected_compensation_approval_ends_in_needs_review() -> None:
    s = two_effects(approve=True).given(cancel())
    first = compensation_call_id("charge-1")
    s.when(command(cmd.ResumeRun, SUPPORT, approvalId=f"approval-{first}", decision="reject",
                   argsHash=s.s.toolCalls[first].argsHash)).then("approval.rejected", "run.needs_review")
    review = s.event("run.needs_review").payload
    assert review.reason == "unresolved_side_effect" and "charge-1" in review.detail
    assert s.s.compensations["reserve-1"].compensationToolCallId is None  # the older one is not undone


def test_unknown_compensation_outcome_ends_in_needs_review_past_its_deadline() -> None:
    s = two_effects().given(cancel())
    first = compensation_call_id("charge-1")
    s.given(claim(s, first)).when(report(cmd.ReportResultUnknown, first, 1, lastError="timeout"))
    assert s.s.status == "compensating" and s.s.toolCalls[first].execution == "result_unknown"
    s.when(command(cmd.ReportReconciled, report(cmd.ReportResultUnknown, first).actor, toolCallId=first,
                   externalRequestId=f"payment-request-{first}-1", outcome="still_unknown",
                   at=tick(3600)))
    assert s.s.status == "needs_review" and s.s.statusReason == "unresolved_side_effect"


def test_unknown_compensation_reconciled_completed_goes_on() -> None:
    s = two_effects().given(cancel())
    first = compensation_call_id("charge-1")
    s.given(claim(s, first), report(cmd.ReportResultUnknown, first, 1, lastError="timeout"))
    s.when(command(cmd.ReportReconciled, report(cmd.ReportResultUnknown, first).actor, toolCallId=first,
                   externalRequestId=f"payment-request-{first}-1", outcome="found_completed",
                   resultRef="r", resultHash="h"))
    assert s.event("compensation.started").payload.toolCallId == "reserve-1"


def test_failed_compensation_ends_in_needs_review() -> None:
    s = two_effects().given(cancel())
    first = compensation_call_id("charge-1")
    s.given(claim(s, first)).when(report(cmd.ReportToolFailed, first, 1, errorClass="declined", retryable=False))
    assert s.event("run.needs_review").payload.detail.startswith("charge-1 cannot be undone")


def test_nothing_is_compensated_twice_when_commands_are_replayed() -> None:
    s = two_effects()
    c = cancel()
    s.given(c)
    first = compensation_call_id("charge-1")
    claimed = claim(s, first)
    reported = done(first)
    s.given(claimed, reported)
    before = s.s
    for again in (c, claimed, reported):
        s.when(again).then()  # a replayed command decides nothing
    assert s.s == before
    s.when(done(first)).rejected("duplicate_report")  # a second report of the same try
    proposals = [e for e in s.log if e.eventType == "tool.call.proposed"
                 and e.payload.toolCallId == first]
    assert len(proposals) == 1


def test_failing_run_compensates_before_it_ends() -> None:
    s = two_effects()
    s.when(command(cmd.FailRun, errorClass="stock_gone", detail="sku-9 sold out")).then(
        "compensation.started", "tool.call.proposed", "tool.call.authorized")
    assert s.event("compensation.started").payload.reason == "run_failed"
    for call in ("charge-1", "reserve-1"):
        undo = compensation_call_id(call)
        s.given(claim(s, undo)).when(done(undo))
    assert s.event("run.compensated").payload.reason == "run_failed"


def test_plan_with_an_underivable_argument_ends_in_needs_review_naming_it() -> None:
    s = Scenario(ctx()).given(create(BudgetAmounts(toolCalls=10, steps=50)),
                              propose("charge-1", "payments.charge", CHARGE, CHARGE_SCHEMA))
    s.given(claim(s, "charge-1"), done("charge-1", {"id": "ch-5"}))
    assert "no field 'chargeId'" in (s.s.compensations["charge-1"].problem or "")
    s.when(cancel())
    review = s.event("run.needs_review").payload
    assert "chargeId = result.chargeId" in review.detail and "undo it by hand" in review.detail


def test_run_without_compensations_is_cancelled_as_before() -> None:
    s = Scenario(ctx()).given(create())
    s.when(cancel()).then("run.cancel_requested", "run.cancelled", "checkpoint.saved", "checkpoint.archived")


def test_compensating_run_refuses_completion_and_cancel() -> None:
    s = two_effects().given(cancel())
    s.when(command(cmd.CompleteRun, outcomeRef="x")).rejected("run_compensating")
    s.when(cancel()).rejected("run_compensating")


def test_user_view_says_in_plain_words_what_was_reversed() -> None:
    from runfacts.projections.user_view import user_view

    s = two_effects().given(cancel())
    first = compensation_call_id("charge-1")
    s.given(claim(s, first), done(first))
    view = user_view(s.s)
    assert view is not None and view.isBusy and not view.canStop
    assert view.statusLine == "Cancelled: undoing completed steps (1 of 2 reversed): charge on order-001 reversed"
    second = compensation_call_id("reserve-1")
    s.given(claim(s, second), done(second))
    view = user_view(s.s)
    assert view is not None and not view.isBusy
    assert view.statusLine == ("Cancelled; every completed step reversed: charge on order-001, "
                               "reserve on order-001")


def test_user_view_says_undoing_stopped_for_a_person() -> None:
    from runfacts.projections.user_view import user_view

    s = two_effects().given(cancel())
    first = compensation_call_id("charge-1")
    s.given(claim(s, first), report(cmd.ReportToolFailed, first, 1, errorClass="declined", retryable=False))
    view = user_view(s.s)
    assert view is not None
    assert view.statusLine == ("Needs a person: unresolved_side_effect while undoing completed steps "
                               "(0 of 2 reversed)")


def test_console_and_trajectory_read_every_compensation_fact() -> None:
    from projection_support import audit_records, facts_of

    from runfacts.dashboard.runpage import words
    from runfacts.projections.trajectory import reducer as trajectory

    s = two_effects().given(cancel())
    for call in ("charge-1", "reserve-1"):
        undo = compensation_call_id(call)
        s.given(claim(s, undo), done(undo))
    said = [words(e) for e in s.log if e.eventType.startswith("compensation.") or e.eventType == "run.compensated"]
    assert said == [
        "reserve-1 can be undone by stock.release", "charge-1 can be undone by payments.refund_charge",
        "Undoing charge-1 with charge-1-undo (payments.refund_charge, run cancelled); then reserve-1",
        "Undoing reserve-1 with reserve-1-undo (stock.release, run cancelled)",
        "Run compensated (run cancelled): reversed charge-1, reserve-1"]
    log = [_millis(e.model_dump()) for e in s.log]
    view = trajectory.initial
    for fact in facts_of(log, trajectory.READS):
        view = trajectory.evolve(view, fact)
    assert view.run.status == "compensated" and view.run.outcome == "run_cancelled"
    undo_steps = [st.action.toolCallId for st in view.steps if st.action is not None
                  and st.action.toolCallId.endswith("-undo")]
    assert undo_steps == ["charge-1-undo", "reserve-1-undo"]
    assert len(audit_records(facts_of(log))) == len(log)  # one chained audit record per fact


def _millis(value: Any) -> Any:
    """An event dict with its datetimes as epoch milliseconds (as the Avro writer takes them)."""
    from datetime import datetime

    if isinstance(value, datetime):
        return int(value.timestamp() * 1000)
    if isinstance(value, dict):
        return {k: _millis(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_millis(v) for v in value]
    return value


def test_cancel_after_a_failed_compensation_ends_cancelled_without_undoing_older_calls() -> None:
    s = two_effects().given(cancel())
    first = compensation_call_id("charge-1")
    s.given(claim(s, first), report(cmd.ReportToolFailed, first, 1, errorClass="declined", retryable=False))
    assert s.s.status == "needs_review"
    s.when(cancel())
    assert "run.cancelled" in [e.eventType for e in s.last] and "compensation.started" not in [
        e.eventType for e in s.last]
    assert s.s.compensations["reserve-1"].compensationToolCallId is None


# --- a person resolves an undo that stopped (`compensation.resolve`, §16) ---------------------------

def resolve(decision: str, call: str = "charge-1", note: str = "", actor: Any = None) -> cmd.ResolveCompensation:
    from decider_support import OPERATOR
    return command(cmd.ResolveCompensation, actor or OPERATOR, toolCallId=call, decision=decision, note=note)


def stopped_at_first_undo() -> Scenario:
    """Cancelled: the refund undoing charge-1 was declined, the run waits for a person."""
    s = two_effects().given(cancel())
    first = compensation_call_id("charge-1")
    s.given(claim(s, first), report(cmd.ReportToolFailed, first, 1, errorClass="declined", retryable=False))
    assert s.s.status == "needs_review"
    return s


def test_retry_after_review_starts_the_undo_again_under_a_new_id_with_the_same_key() -> None:
    s = stopped_at_first_undo()
    s.when(resolve("retry")).then("compensation.resolved", "compensation.started", "tool.call.proposed",
                                  "tool.call.authorized")
    again = compensation_call_id("charge-1", 1)
    assert again == "charge-1-undo-2" and s.event("tool.call.proposed").payload.toolCallId == again
    assert s.s.status == "compensating" and s.s.compensations["charge-1"].compensationToolCallId == again
    first = compensation_call_id("charge-1")
    # the same arguments, so the same idempotency key: a tool that did refund the first time answers with it
    assert s.s.toolCalls[again].idempotencyKey == s.s.toolCalls[first].idempotencyKey
    s.given(claim(s, again)).when(done(again))
    assert s.event("compensation.started").payload.toolCallId == "reserve-1"
    second = compensation_call_id("reserve-1")
    s.given(claim(s, second)).when(done(second))
    assert list(s.event("run.compensated").payload.compensatedToolCalls) == ["charge-1", "reserve-1"]


def test_done_by_hand_after_review_goes_on_with_the_older_undos() -> None:
    s = stopped_at_first_undo()
    s.when(resolve("done_by_hand", note="refunded by bank transfer, ticket 88"))
    resolved = s.event("compensation.resolved").payload
    assert (resolved.decision, resolved.note, resolved.actor.subjectId) == (
        "done_by_hand", "refunded by bank transfer, ticket 88", "olga")
    assert s.event("compensation.started").payload.toolCallId == "reserve-1"
    second = compensation_call_id("reserve-1")
    s.given(claim(s, second)).when(done(second))
    assert list(s.event("run.compensated").payload.compensatedToolCalls) == ["charge-1", "reserve-1"]
    assert s.s.status == "compensated"


def test_give_up_after_review_ends_the_run_failed_naming_what_is_left_undone() -> None:
    s = stopped_at_first_undo()
    s.when(resolve("give_up", note="customer keeps the goods"))
    assert [e.eventType for e in s.last][:3] == ["compensation.resolved", "run.failed", "checkpoint.saved"]
    assert list(s.event("compensation.resolved").payload.notUndone) == ["charge-1", "reserve-1"]
    failed = s.event("run.failed").payload
    assert failed.errorClass == "compensation_abandoned" and "charge-1, reserve-1" in failed.detail
    assert s.s.status == "failed" and s.s.terminal and "checkpoint.archived" in [e.eventType for e in s.last]
    assert s.s.compensations["reserve-1"].compensationToolCallId is None  # nothing undone behind the person


def test_plan_that_cannot_be_derived_is_done_by_hand_never_retried() -> None:
    s = Scenario(ctx()).given(create(BudgetAmounts(toolCalls=10, steps=50)),
                              propose("charge-1", "payments.charge", CHARGE, CHARGE_SCHEMA))
    s.given(claim(s, "charge-1"), done("charge-1", {"id": "ch-5"}), cancel())
    assert s.s.status == "needs_review" and s.s.compensating == "run_cancelled"
    assert "cannot be derived" in s.when(resolve("retry")).rejected("not_retryable").detail
    s.when(resolve("done_by_hand", note="refunded in the PSP console"))
    assert list(s.event("run.compensated").payload.compensatedToolCalls) == ["charge-1"]
    assert s.s.status == "compensated"


def test_retry_of_an_undo_whose_outcome_stayed_unknown_reuses_its_idempotency_key() -> None:
    s = two_effects().given(cancel())
    first = compensation_call_id("charge-1")
    s.given(claim(s, first), report(cmd.ReportResultUnknown, first, 1, lastError="timeout"))
    s.given(command(cmd.ReportReconciled, report(cmd.ReportResultUnknown, first).actor, toolCallId=first,
                    externalRequestId=f"payment-request-{first}-1", outcome="still_unknown", at=tick(3600)))
    assert s.s.status == "needs_review"
    s.when(resolve("retry"))
    again = compensation_call_id("charge-1", 1)
    assert s.s.toolCalls[again].idempotencyKey == s.s.toolCalls[first].idempotencyKey


def test_resolve_is_refused_unless_an_undo_stopped_for_the_named_call() -> None:
    s = two_effects()
    assert "no undo of it stopped" in s.when(resolve("retry")).rejected("no_stopped_compensation").detail
    s = stopped_at_first_undo()
    assert "charge-1's" in s.when(resolve("retry", call="reserve-1")).rejected("not_the_stopped_compensation").detail
    s.when(resolve("give_up")).rejected("note_required")
    s.when(resolve("done_by_hand", note="  ")).rejected("note_required")
    s.given(resolve("give_up", note="left as is"))
    s.when(resolve("retry")).rejected("run_ended")


def test_resolve_needs_the_operator_role_and_names_it_when_refused() -> None:
    from decider_support import OPERATOR, policy_ctx
    s = stopped_at_first_undo()
    s.ctx = replace(policy_ctx(), capabilities=ctx().capabilities)
    for who in (SUPPORT, USER, replace_actor(SUPPORT, roles=("supervisor",)),
                replace_actor(OPERATOR, roles=("agent",))):
        refused = s.when(resolve("retry", actor=who)).rejected("forbidden_role")
        assert "compensation.resolve needs the role operator" in refused.detail
    assert s.s.status == "needs_review"
    s.when(resolve("retry"))
    assert s.s.status == "compensating"


def replace_actor(actor: Any, **changes: Any) -> Any:
    return actor.model_copy(update=changes)


def test_resolve_replayed_decides_nothing() -> None:
    s = stopped_at_first_undo()
    c = resolve("retry")
    s.given(c)
    before = s.s
    s.when(c).then()
    assert s.s == before


def test_console_user_view_and_trajectory_read_a_resolution_in_plain_words() -> None:
    from runfacts.dashboard.runpage import words
    from runfacts.projections.trajectory import reducer as trajectory
    from runfacts.projections.user_view import status_line

    s = stopped_at_first_undo()
    s.given(resolve("done_by_hand", note="refunded by bank transfer"))
    resolved = next(e for e in s.log if e.eventType == "compensation.resolved")
    assert words(resolved) == ("olga resolved the undo of charge-1: undone by hand — refunded by bank transfer")
    assert status_line(s.s, None).endswith("(1 of 2 reversed): charge on order-001 (by hand) reversed")
    from projection_support import facts_of
    view = trajectory.initial
    for fact in facts_of([_millis(e.model_dump()) for e in s.log], trajectory.READS):
        view = trajectory.evolve(view, fact)
    assert view.run.status == "compensating"


def test_console_offers_the_operator_a_resolve_form_and_the_decider_refuses_anyone_else(tmp_path: Any) -> None:
    """The dashboard path: the run page shows the form to an operator only; the command it builds
    from a support agent's POST is refused forbidden_role by the decider, an operator's accepted."""
    from decider_support import policy_ctx
    from ops_support import PASSWORDS, write_users
    from starlette.testclient import TestClient

    from runfacts.dashboard.app import Dashboard, create_app
    from runfacts.dashboard.feed import FeedSettings, StateFeed, ViewFeed, decode_view
    from runfacts.dashboard.session import LOGIN_CSRF_COOKIE, SessionSigner
    from runfacts.ops.control import Outcome
    from runfacts.processors.decider.core import decide
    from runfacts.processors.policy.access import load_policy
    from runfacts.projections.user_view import publisher
    from runfacts.settings import KafkaSettings
    from runfacts.topics import TopicNames

    state = stopped_at_first_undo().s
    secured = replace(policy_ctx(), capabilities=ctx().capabilities)

    class DecidingSender:  # the decider itself answers (no broker): what the dashboard sent is judged
        def send(self, command: Any, headers: Any = None) -> Outcome:
            return Outcome(command, tuple(decide(command, state, secured)))

        def close(self) -> None:
            pass

    kafka, names = KafkaSettings(bootstrap_servers="127.0.0.1:1"), TopicNames("dash-undo")
    views = ViewFeed(kafka, FeedSettings(names.user_view, decode_view))
    states = StateFeed(kafka, FeedSettings(names.state))
    for _topic, key, value in publisher(names.user_view)(state):
        views.apply(key, value)
    states.apply(state.runId.encode(), state.model_dump_json().encode())
    users = load_users_file(write_users(tmp_path / "users.toml"))
    dashboard = Dashboard(views, states, users, SessionSigner(b"s" * 32), DecidingSender(),  # type: ignore[arg-type]
                          policy=load_policy())
    answers = {}
    for user in ("alice", "olga"):
        with TestClient(create_app(dashboard, manage_feed=False), base_url="http://dash.test") as c:
            token = c.get("/login").cookies[LOGIN_CSRF_COOKIE]
            c.post("/login", data={"username": user, "password": PASSWORDS[user], "csrf": token},
                   follow_redirects=False)
            page = c.get(f"/runs/{state.runId}").text
            assert ('id="resolve-compensation"' in page) == (user == "olga")
            csrf = page.split('name="csrf" value="')[1].split('"')[0]
            answers[user] = c.post(f"/runs/{state.runId}/resolve-compensation",
                                   headers={"accept": "application/json"},
                                   data={"csrf": csrf, "decision": "retry", "tool_call_id": "charge-1"}).json()
    assert not answers["alice"]["accepted"]
    assert "compensation.resolve needs the role operator" in answers["alice"]["message"]
    assert answers["olga"]["accepted"] and answers["olga"]["events"][:2] == ["compensation.resolved",
                                                                             "compensation.started"]


def load_users_file(path: Any) -> Any:
    from runfacts.security.identity import load_users
    return load_users(path)
