"""Per-capability limits (manifest `maxConcurrency`, `ratePerSecond`), enforced by each dispatcher:
a claimed call waits for a free slot or for the rate's interval (`slot:` timer), then runs once."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest
from decider_support import MANIFEST, SUPPORT

from runfacts.processors.dispatcher import core
from runfacts.processors.dispatcher.adapters import ToolAdapter, ToolRequest
from runfacts.processors.dispatcher.app import DispatcherSettings, DispatcherShell
from runfacts.processors.policy.capabilities import parse_capabilities
from runfacts.schemas import commands as cmd
from runfacts.schemas.errors import ConfigError

from .dispatcher_support import NAMES, Loop

SECOND = {"orderId": "order-002", "amountMinor": 1500, "currency": "EUR"}


def _second_refund(loop: Loop) -> None:
    """Propose and approve a second refund in the run, forwarding without waiting for the pool."""
    stored = loop.args.put(SECOND, ref="args/tool-call-032")
    loop.pipe(loop.at(cmd.ProposeToolCall, toolCallId="tool-call-032", capabilityId="payments.refund",
                      argsHash=stored.hash, argsRef=stored.ref, target="order-002", action="refund",
                      risk="high", summary="Refund 15.00 EUR"))
    for _ in range(5):
        loop.step()
    loop.pipe(loop.at(cmd.ResumeRun, SUPPORT, approvalId="approval-tool-call-032", decision="approve",
                      argsHash=stored.hash))
    for _ in range(5):
        loop.step()


class Clocked:
    """The refund adapter, noting the loop's clock at each start; `gate` holds every call."""

    def __init__(self, loop: Loop, inner: ToolAdapter, gate: threading.Event | None = None) -> None:
        self.loop, self.inner, self.gate = loop, inner, gate
        self.started: list[int] = []
        self.running = self.most = 0
        self._lock = threading.Lock()

    def execute(self, request: ToolRequest) -> Any:
        with self._lock:
            self.started.append(self.loop.decider.now_ms)
            self.running += 1
            self.most = max(self.most, self.running)
        try:
            if self.gate is not None:
                assert self.gate.wait(10), "the gate was never opened"
            return self.inner.execute(request)
        finally:
            with self._lock:
                self.running -= 1

    def lookup(self, external_request_id: str) -> Any:
        return self.inner.lookup(external_request_id)

    def cancel(self, external_request_id: str) -> bool:
        return self.inner.cancel(external_request_id)


def test_admit_waits_for_a_slot_then_for_the_rates_interval() -> None:
    assert core.admit(core.Limits(), 50, 0, 0) is None
    assert core.admit(core.Limits(max_concurrency=2), 2, None, 1_000) == 1_000 + core.SLOT_POLL_MS
    assert core.admit(core.Limits(max_concurrency=2), 1, None, 1_000) is None
    assert core.admit(core.Limits(rate_per_second=4), 0, 1_000, 1_100) == 1_250  # one start per 250 ms
    assert core.admit(core.Limits(rate_per_second=4), 0, 1_000, 1_250) is None
    assert core.admit(core.Limits(rate_per_second=0.5), 0, 0, 1) == 2_000


def test_manifest_limits_reach_the_dispatcher_and_are_validated() -> None:
    limited = "needsApproval = true\nmaxConcurrency = 2\nratePerSecond = 2.5\n"
    catalog = parse_capabilities(MANIFEST.replace("needsApproval = true\n", limited, 1))
    manifest = catalog.get("payments.refund")
    assert (manifest.max_concurrency, manifest.rate_per_second) == (2, 2.5)
    shell = DispatcherShell(DispatcherSettings(names=NAMES, catalog=catalog, incarnation=1), {}, None)  # type: ignore[arg-type]
    assert shell.limits == {"payments.refund": core.Limits(max_concurrency=2, rate_per_second=2.5)}
    with pytest.raises(ConfigError, match="maxConcurrency=0"):
        parse_capabilities(MANIFEST.replace("needsApproval = true\n", "needsApproval = true\nmaxConcurrency = 0\n", 1))


def test_rate_per_second_spaces_the_starts_of_a_capabilitys_calls(tmp_path: Path) -> None:
    loop = Loop(tmp_path)
    clocked = Clocked(loop, loop.adapter.inner)
    loop.adapter.inner = clocked  # type: ignore[assignment]
    loop.shell.limits = {"payments.refund": core.Limits(rate_per_second=2)}  # as the manifest gives it
    try:
        loop.start_refund()
        _second_refund(loop)
        loop.settle()
        assert len(clocked.started) == 1 and loop.call(call="tool-call-032").execution == "dispatching"
        for _ in range(6):
            loop.advance(100)
        first, second = clocked.started
        assert second - first >= 500  # never faster than 2 a second
        assert loop.call().execution == loop.call(call="tool-call-032").execution == "completed"
        assert len(loop.sim.ledger()) == 2
    finally:
        loop.close()


def test_max_concurrency_runs_one_call_at_a_time_and_each_once(tmp_path: Path) -> None:
    loop = Loop(tmp_path, pooled=True)
    gate = threading.Event()
    clocked = Clocked(loop, loop.adapter.inner, gate)
    loop.adapter.inner = clocked  # type: ignore[assignment]
    loop.shell.limits = {"payments.refund": core.Limits(max_concurrency=1)}
    try:
        loop.start_refund(approve=False)
        loop.pipe(loop.approval())
        for _ in range(5):
            loop.step()
        _second_refund(loop)
        loop.dispatcher.advance(core.SLOT_POLL_MS)  # the second looks for a slot: still taken
        assert len(clocked.started) == 1 and clocked.running == 1
        gate.set()
        for _ in range(10):
            loop.advance(core.SLOT_POLL_MS)
        assert clocked.most == 1 and len(clocked.started) == 2 and len(loop.sim.ledger()) == 2
        assert loop.call().execution == loop.call(call="tool-call-032").execution == "completed"
    finally:
        gate.set()
        loop.close()
