"""Tool calls off the engine transaction (ToolPool): claim and commit, run on the pool, report
in a later transaction; a dispatcher that dies while a call runs leaves it to reconciliation."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from concurrent.futures import Future
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import pytest
from decider_support import REFUND_HASH

from runfacts.processors.dispatcher.adapters import ToolAdapter, ToolRequest
from runfacts.processors.dispatcher.core import PollPolicy
from runfacts.processors.dispatcher.pool import ToolPool
from runfacts.telemetry import TOOL_CALLS_IN_FLIGHT, Telemetry

from .dispatcher_support import Loop


@dataclass
class Gated:
    """An adapter whose calls wait until the test opens the gate."""

    inner: ToolAdapter
    gate: threading.Event

    def execute(self, request: ToolRequest) -> Any:
        assert self.gate.wait(10), "the gate was never opened"
        return self.inner.execute(request)

    def lookup(self, external_request_id: str) -> Any:
        return self.inner.lookup(external_request_id)

    def cancel(self, external_request_id: str) -> bool:
        return self.inner.cancel(external_request_id)


@pytest.fixture
def gated(tmp_path: Path) -> Iterator[tuple[Loop, threading.Event]]:
    loop = Loop(tmp_path, pooled=True)
    gate = threading.Event()
    loop.adapter.inner = Gated(loop.adapter.inner, gate)
    loop.start_refund(approve=False)
    loop.pipe(loop.approval(REFUND_HASH))
    for _ in range(5):  # forward without waiting for the pool: the call is claimed and running
        loop.step()
    yield loop, gate
    gate.set()
    loop.close()


def _progress(loop: Loop) -> str:
    import json

    (raw,) = loop.dispatcher.read_store("progress").values()
    return json.loads(raw)["phase"]


def test_claimed_call_runs_off_the_transaction_and_reports_in_a_later_one(
        gated: tuple[Loop, threading.Event]) -> None:
    loop, gate = gated
    assert loop.types()[-3:] == ["tool.call.dispatching", "approval.consumed", "budget.debited"]
    assert (_progress(loop), loop.pool and loop.pool.in_flight) == ("executing", 1)
    assert loop.dispatcher.advance(0) == 1 and "tool.call.completed" not in loop.types()  # polled, still running
    gauges: list[tuple[str, float]] = []

    class Recording(Telemetry):
        def gauge(self, metric: str, value: float, attributes: Any = None) -> None:
            gauges.append((metric, value))

    loop.shell.telemetry = Recording()
    gate.set()
    loop.settle()
    assert gauges == [(TOOL_CALLS_IN_FLIGHT, 0)]
    assert "tool.call.completed" in loop.types() and len(loop.sim.ledger()) == 1
    completed = next(e for e in loop.events() if e.eventType == "tool.call.completed")
    assert completed.payload.result and loop.sim.ledger()[0].refund_id in completed.payload.result


def test_restarted_dispatcher_reconciles_with_the_value_when_it_died_while_the_tool_ran(
        gated: tuple[Loop, threading.Event]) -> None:
    loop, gate = gated
    old_pool = loop.pool
    gate.set()  # the tool acts at the provider; its answer dies with the process
    assert old_pool is not None and old_pool.wait_idle(10)
    loop.restart_dispatcher(incarnation=2_000)
    loop.advance(0)  # the restored `done:` timer fires in the new incarnation
    types = loop.types()
    assert "tool.call.result_unknown" in types and "tool.call.completed" not in types
    reconciled = next(e for e in loop.events() if e.eventType == "tool.call.reconciled")
    assert reconciled.payload.outcome == "found_completed"
    assert loop.sim.ledger()[0].refund_id in (reconciled.payload.result or "")
    assert len(loop.sim.ledger()) == 1 and loop.adapter.executed == []  # the new one never called


def test_restarted_dispatcher_claims_again_with_the_same_key_when_the_queued_call_never_ran(
        gated: tuple[Loop, threading.Event]) -> None:
    loop, _ = gated  # the gate stays shut: the claimed call is still queued when the process dies
    loop.restart_dispatcher(incarnation=2_000)
    loop.advance(0)
    reconciled = [e.payload.outcome for e in loop.events() if e.eventType == "tool.call.reconciled"]
    assert reconciled == ["not_found"]
    call = loop.call()
    assert (call.execution, call.attempts) == ("completed", 2) and len(loop.sim.ledger()) == 1
    assert {r.idempotency_key for r in loop.adapter.executed} == {call.idempotencyKey}


def test_counting_the_calls_in_flight_does_not_look_at_every_kept_future(monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 34: `in_flight` (read twice a call, for the log line and the gauge) asked each of up
    to 10,000 kept futures whether it was done: 10% of the dispatcher's samples at 30 calls/s."""
    pool = ToolPool(2)
    for i in range(50):
        pool.start(("r", f"c{i}", 1, 1), int, i)
    assert pool.wait_idle(5)
    asked: list[object] = []
    real_done = Future.done
    monkeypatch.setattr(Future, "done", lambda self: asked.append(self) or real_done(self))
    assert pool.in_flight == 0 and asked == []
    pool.close()


def test_pool_starts_a_memo_once_and_counts_calls_in_flight() -> None:
    pool, gate, calls = ToolPool(2), threading.Event(), []

    def call(n: int) -> int:
        calls.append(n)
        gate.wait(5)
        return n

    first = pool.start(("r", "c", 1, 1), call, 1)
    assert pool.start(("r", "c", 1, 1), call, 2) is first and pool.in_flight == 1
    gate.set()
    assert pool.wait_idle(5) and first.result() == 1 and calls == [1] and pool.in_flight == 0
    with pytest.raises(ValueError, match="threads=0"):
        ToolPool(0)
    pool.close()


def test_an_instant_pooled_call_is_reported_in_its_dispatching_transaction(tmp_path: Path) -> None:
    """Issue 34: a try that ends within the first look (`poll.first_ms`) is reported with the
    `dispatching` it executes, as an inline call is, not after one more commit and its `done:` timer."""
    loop = Loop(tmp_path, pooled=True)
    loop.shell.settings = replace(loop.shell.settings, poll=PollPolicy(first_ms=5_000, max_ms=5_000))
    try:
        loop.start_refund(approve=False)
        loop.pipe(loop.approval(REFUND_HASH))
        for _ in range(5):  # forward events and commands only: no timer fires
            loop.step()
        assert "tool.call.completed" in loop.types() and len(loop.sim.ledger()) == 1
        assert _progress(loop) == "verifying"  # the refund's settlement track: past executing, no done: timer
    finally:
        loop.close()
