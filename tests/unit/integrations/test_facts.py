"""The bridges' verdict on a gated call over real decider output (given commands -> events):
unknown, pending with the approval in plain words, granted, rejected, expired; the runfacts call
id depends on the arguments (the integration test checks it is `Run.propose`'s default)."""

from __future__ import annotations

from datetime import timedelta

import pytest
from decider_support import RUN, Scenario, create, propose_refund, resume, timer

from runfacts.client.outcomes import Entry
from runfacts.integrations import call_id, verdict
from runfacts.integrations.facts import approval_request

CALL = "tool-call-031"


def entries(s: Scenario) -> list[Entry]:
    return [Entry(i, e) for i, e in enumerate(s.log)]


def test_verdict_is_unknown_for_a_call_runfacts_never_saw() -> None:
    found = verdict(RUN, entries(Scenario().given(create(), propose_refund())), "call-forged")
    assert (found.status, found.reason) == ("unknown", "runfacts holds no proposal of this call")


def test_verdict_is_pending_with_the_approval_in_plain_words_while_nobody_decided() -> None:
    log = entries(Scenario().given(create(), propose_refund()))
    request = approval_request(log, CALL, "refund", "order-001")
    assert request is not None and request["approvalId"] == f"approval-{CALL}"
    assert request["asks"] == "refund on order-001 (high risk)" and request["requiredRole"] == "support_agent"
    assert verdict(RUN, log, CALL, request).status == "pending"


def test_verdict_is_granted_by_the_approver_and_rejected_naming_who() -> None:
    granted = verdict(RUN, entries(Scenario().given(create(), propose_refund(), resume())), CALL)
    assert (granted.status, granted.approver, granted.reason) == ("granted", "alice", "approved by alice")
    rejected = verdict(RUN, entries(Scenario().given(create(), propose_refund(), resume("reject"))), CALL)
    assert (rejected.status, rejected.reason) == ("rejected", "rejected by alice")


def test_verdict_is_expired_when_the_expiry_timer_fired() -> None:
    s = Scenario().given(create(), propose_refund())
    expires = s.s.approvals[f"approval-{CALL}"].expiresAt
    s.given(timer("approval_expiry", f"approval-{CALL}", expires + timedelta(seconds=1)))
    found = verdict(RUN, entries(s), CALL)
    assert found.status == "expired" and "expired before anyone decided" in found.reason


def test_call_id_depends_on_the_arguments_not_their_order() -> None:
    args = {"orderId": "order-001", "amountMinor": 4200, "currency": "EUR"}
    same = call_id("refund-T-1", "payments.refund", "order-001", dict(reversed(list(args.items()))))
    assert call_id("refund-T-1", "payments.refund", "order-001", args) == same  # key order does not matter
    assert call_id("refund-T-1", "payments.refund", "order-001", {**args, "amountMinor": 4201}) != same
    assert same.startswith("call-") and len(same) == 25


def test_failure_text_tells_the_model_what_failed_and_that_the_call_never_runs_again() -> None:
    from runfacts.client.errors import ToolFailed
    from runfacts.integrations.facts import failure_text

    text = failure_text("refund", ToolFailed(RUN, CALL, "refused", False, "refund_declined"))
    assert text == ("refund failed (refused: refund_declined; not retryable). It was authorized and ran once; "
                    f"runfacts will not run this call again (runfacts call {CALL})")
    retryable = failure_text("refund", ToolFailed(RUN, CALL, "tool_down", True))
    assert "(tool_down; an operator may retry it through runfacts)" in retryable


def test_a_decider_rejection_of_the_arguments_is_a_validation_error_for_the_bridges() -> None:
    from runfacts.client import CommandRejected
    from runfacts.integrations.facts import rejected_arguments

    refused = CommandRejected(RUN, "tool.call.propose", "invalid_arguments",
                              "amountMinor: less than or equal to 100000")
    assert rejected_arguments(refused) == "amountMinor: less than or equal to 100000"
    assert rejected_arguments(CommandRejected(RUN, "tool.call.propose", "invalid_arguments")) == (
        "the arguments do not fit the tool's schema")
    assert rejected_arguments(CommandRejected(RUN, "tool.call.propose", "stale_version")) is None
    assert rejected_arguments(ValueError("invalid_arguments")) is None


def test_a_call_whose_arguments_were_refused_at_dispatch_is_never_said_to_have_run() -> None:
    from runfacts.client import ToolFailed
    from runfacts.integrations.facts import failure_text

    refused = failure_text("refund", ToolFailed(RUN, CALL, "validation", False, "invalid_arguments: amountMinor"))
    assert "ran once" not in refused and "nothing happened" in refused and "will not run this call again" in refused
    declined = failure_text("refund", ToolFailed(RUN, CALL, "refused", False, "refund_declined"))
    assert "It was authorized and ran once" in declined


def test_a_call_dispatched_before_the_run_was_cancelled_is_never_not_done() -> None:
    from decider_support import approved_refund, command, completed, dispatched_refund

    from runfacts.client import RunCancelled
    from runfacts.client.outcomes import call_result
    from runfacts.integrations import OutcomeNotKnown
    from runfacts.integrations.facts import settle
    from runfacts.schemas import commands as cmd

    cancel = command(cmd.CancelRun, reason="operator")
    in_flight = dispatched_refund().given(cancel)
    ended = call_result(RUN, entries(in_flight), CALL).error  # what the client's wait says: cancelled
    assert isinstance(ended, RunCancelled)
    with pytest.raises(OutcomeNotKnown, match="it may have happened") as unknown:
        settle(RUN, entries(in_flight), CALL, "refund", ended)
    assert "not done" not in str(unknown.value)
    in_flight.when(completed(result='{"refundId": "re_1"}'))  # the dispatcher's report, after the cancel: it ran
    assert isinstance(call_result(RUN, entries(in_flight), CALL).error, RunCancelled)  # the wait still says so
    assert settle(RUN, entries(in_flight), CALL, "refund", ended) == {"refundId": "re_1"}  # the model gets it
    never_left = approved_refund().given(command(cmd.CancelRun, reason="operator"))  # authorized, not dispatched
    with pytest.raises(RunCancelled):
        settle(RUN, entries(never_left), CALL, "refund", ended)  # truly not done
