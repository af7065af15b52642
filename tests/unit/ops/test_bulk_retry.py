"""`runfacts retry --capability X --since T`: which calls a bulk retry sends (pure selection)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from decider_support import OPERATOR, Scenario, claim, create, failed, propose_lookup

from runfacts.ops import control
from runfacts.processors.decider.state import RunState
from runfacts.processors.policy.retry import args_hash, idempotency_key

CAP = "orders.lookup"


def _failed_run(run: str, retryable: bool = True, error: str = "transient") -> RunState:
    key = idempotency_key(run, "lookup", "order-001", args_hash({"orderId": "order-001"}))
    state = Scenario().given(create(run=run), propose_lookup("call-1", run=run), claim("call-1", key=key, run=run),
                             failed("call-1", retryable=retryable, error=error, run=run)).state
    assert state is not None and state.toolCalls["call-1"].execution == "failed"
    return state


def test_bulk_retry_selects_the_retryable_failures_of_the_capability_since_the_time() -> None:
    a, b, c = _failed_run("run-a"), _failed_run("run-b"), _failed_run("run-c", retryable=False, error="refused")
    since = a.toolCalls["call-1"].finishedAt - timedelta(seconds=1)  # type: ignore[operator]
    targets = control.retry_targets([b, a, c], CAP, since)
    assert [(s.runId, call.toolCallId) for s, call in targets.calls] == [("run-a", "call-1"), ("run-b", "call-1")]
    assert control.retry_targets([a, b], "payments.refund", since).calls == ()
    later = datetime.now(UTC) + timedelta(days=3650)
    assert control.retry_targets([a, b], CAP, later).calls == ()  # failed before --since


def test_bulk_retry_leaves_out_runs_that_take_no_retry_and_sends_no_expected_version() -> None:
    stopped = _failed_run("run-d").model_copy(update={"status": "cancelled"})
    since = datetime(2000, 1, 1, tzinfo=UTC)
    targets = control.retry_targets([stopped, _failed_run("run-e")], CAP, since)
    assert [s.runId for s, _ in targets.calls] == ["run-e"] and targets.skipped == 1
    state, call = targets.calls[0]
    command = control.bulk_retry_command(state, call, control.Issue(OPERATOR, "cli-1", since, "ops:bulk-retry:b1"))
    assert (command.commandType, command.payload.toolCallId) == ("tool.call.retry", "call-1")
    assert command.expectedVersion is None
    assert command.correlationId == "ops:bulk-retry:b1"
