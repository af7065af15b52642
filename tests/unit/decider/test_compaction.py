"""Settled tool calls are compacted: a long run's state stays bounded, and what the decider
must still know of an old call (its id, how it ended, its arguments' hash) survives."""

from __future__ import annotations

import io

from decider_support import (
    DISPATCHER,
    OPERATOR,
    REFUND_HASH,
    RUN,
    T0,
    Scenario,
    claim,
    command,
    completed,
    create,
    failed,
    propose_refund,
    resume,
    unknown,
)
from rich.console import Console

from runfacts.cli.render import inspect_panel
from runfacts.ops.views import operator_summary
from runfacts.processors.decider.evolve import action_hash
from runfacts.processors.decider.state import ACTION_WINDOW, KEEP_SETTLED
from runfacts.processors.decider.state_json import dump_state
from runfacts.processors.policy.retry import args_hash, idempotency_key
from runfacts.schemas import commands as cmd
from runfacts.schemas.common import BudgetAmounts


def _hash(i: int) -> str:
    return args_hash({"orderId": f"order-{i:05d}"})


def propose(i: int, args: str | None = None) -> cmd.ProposeToolCall:
    return command(cmd.ProposeToolCall, toolCallId=f"call-{i:05d}", capabilityId="orders.lookup",
                   argsHash=args or _hash(i), argsRef=f"args/{i}", target=f"order-{i:05d}", action="lookup",
                   risk="low", summary=f"look up order-{i:05d}")


def run_call(i: int, verification: str | None = "confirmed_success") -> list:
    """Propose, claim and complete lookup i; then verify it (None: verification stays pending)."""
    call = f"call-{i:05d}"
    key = idempotency_key(RUN, "lookup", f"order-{i:05d}", _hash(i))
    steps = [propose(i), claim(call, key=key), completed(call)]
    if verification is not None:
        steps.append(command(cmd.ReportVerification, DISPATCHER, toolCallId=call, status=verification))
    return steps


def long_run(calls: int, **kw) -> Scenario:
    s = Scenario().given(create(BudgetAmounts(toolCalls=100_000, steps=100_000)))
    for i in range(calls):
        s.given(*run_call(i, **kw))
    return s


def test_state_keeps_only_recent_settled_calls_whole_when_run_makes_many_calls():
    s = long_run(KEEP_SETTLED + 40)

    # compaction runs at each proposal: the last proposal kept KEEP_SETTLED settled calls, then
    # that last call settled too
    assert len(s.s.toolCalls) == KEEP_SETTLED + 1
    assert list(s.s.toolCalls)[0] == f"call-{39:05d}"
    assert len(s.s.settledCalls) == 39
    assert s.s.settledCalls["call-00000"] == ("completed/confirmed_success", _hash(0)[:16])


def test_state_grows_by_a_short_entry_per_call_when_calls_are_compacted():
    small, large = long_run(ACTION_WINDOW + 20).s, long_run(ACTION_WINDOW + 120).s

    per_call = (len(dump_state(large)[0]) - len(dump_state(small)[0])) / 100
    assert per_call < 80, per_call  # its settledCalls entry; a whole call is ~700 bytes of state JSON
    assert len(large.actionCounts) == ACTION_WINDOW


def test_proposal_rejected_as_already_proposed_when_id_and_args_match_a_compacted_call():
    s = long_run(KEEP_SETTLED + 5)

    s.when(propose(0)).rejected("already_proposed")
    s.when(propose(0, args=_hash(999))).rejected("tool_call_exists")


def test_commands_on_a_compacted_call_rejected_as_tool_call_settled_naming_how_it_ended():
    s = long_run(KEEP_SETTLED + 5)

    rejection = s.when(command(cmd.RetryToolCall, OPERATOR, toolCallId="call-00000")).rejected("tool_call_settled")
    assert "completed/confirmed_success" in rejection.detail
    s.when(command(cmd.ReportVerification, DISPATCHER, toolCallId="call-00001",
                   status="confirmed_failure")).rejected("tool_call_settled")
    s.when(completed("call-00002")).rejected("tool_call_settled")


def test_calls_that_can_still_change_stay_whole_when_they_are_the_oldest():
    s = Scenario().given(create(BudgetAmounts(toolCalls=100_000, steps=100_000)))
    s.given(*run_call(0, verification=None))  # verification pending: the dispatcher still polls
    s.given(*run_call(1)[:2], failed("call-00001", retryable=True))  # a retry may follow
    s.given(*run_call(2)[:2], unknown("call-00002"))  # result_unknown: only reconciliation ends it
    for i in range(3, 3 + KEEP_SETTLED + 10):
        s.given(*run_call(i))

    assert {"call-00000", "call-00001", "call-00002"} <= set(s.s.toolCalls)
    assert set(s.s.settledCalls) == {f"call-{i:05d}" for i in range(3, 12)}  # 41 settled at the last proposal


def test_call_that_just_settled_stays_whole_until_the_next_proposal():
    s = Scenario().given(create(BudgetAmounts(toolCalls=100_000, steps=100_000)), *run_call(0, verification=None))
    for i in range(1, KEEP_SETTLED + 1):
        s.given(*run_call(i))
    s.when(command(cmd.ReportVerification, DISPATCHER, toolCallId="call-00000", status="inconclusive"))

    assert "call-00000" in s.s.toolCalls  # the settling event's consumers still find it
    s.given(propose(KEEP_SETTLED + 1))
    assert "call-00000" not in s.s.toolCalls and s.s.settledCalls["call-00000"][0].startswith("completed/")


def test_failed_non_retryable_calls_are_compacted_with_their_error_class():
    s = Scenario().given(create(BudgetAmounts(toolCalls=100_000, steps=100_000)))
    s.given(*run_call(0)[:2], failed("call-00000", retryable=False, error="card_declined"))
    for i in range(1, KEEP_SETTLED + 2):
        s.given(*run_call(i))

    assert s.s.settledCalls["call-00000"] == ("failed/card_declined", _hash(0)[:16])


def test_loop_count_restarts_when_action_left_the_window_of_recent_actions():
    s = Scenario().given(create(BudgetAmounts(toolCalls=100_000, steps=100_000)))
    s.given(*run_call(0))
    assert s.s.actionCounts[action_hash("orders.lookup", _hash(0))] == 2  # proposed + claimed
    for i in range(1, ACTION_WINDOW + 1):
        s.given(*run_call(i))

    assert action_hash("orders.lookup", _hash(0)) not in s.s.actionCounts
    assert len(s.s.actionCounts) == ACTION_WINDOW


def test_inspect_says_how_many_calls_were_compacted_when_a_run_has_some():
    summary = operator_summary(long_run(KEEP_SETTLED + 3).s, T0)
    out = io.StringIO()
    Console(file=out, width=200).print(inspect_panel(summary))

    assert summary["settledCalls"] == 2 and "2 older settled calls compacted" in out.getvalue()


def test_call_whose_approval_was_rejected_is_compacted_when_it_is_old():
    s = Scenario().given(create(BudgetAmounts(toolCalls=100_000, steps=100_000)), propose_refund(),
                         resume(decision="reject"))
    assert s.s.toolCalls["tool-call-031"].closedReason == "approval_rejected"
    for i in range(KEEP_SETTLED + 1):
        s.given(*run_call(i))

    assert s.s.settledCalls["tool-call-031"] == ("approval_rejected", REFUND_HASH[:16])
    assert "approval-tool-call-031" not in s.s.approvals
