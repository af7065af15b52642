"""runfacts.testing.contracts held against the adapters runfacts ships: the suite a user's adapter
is held to must pass for ours (and fail for an adapter that breaks a rule)."""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from runfacts.connectors.refund_adapter import RefundAdapter, RefundAdapterSettings
from runfacts.dev.provider.server import PaymentSimulator, SimSettings
from runfacts.processors.dispatcher.adapters import ToolAdapter, ToolCompleted, ToolOutcome, ToolRequest
from runfacts.testing import FencingContract, ToolAdapterContract
from runfacts.tools import LookupContext, ToolContext, ToolRegistry

KEY = "sk_test_contract"


class TestRefundAdapterKeepsTheContract(FencingContract):
    """The packaged refund adapter against the payment simulator (it fences stale epochs)."""

    capability_id = "payments.refund"

    @pytest.fixture(autouse=True)
    def _simulator(self, tmp_path: Path) -> Iterator[None]:
        with PaymentSimulator(SimSettings(api_key=KEY, ledger_path=tmp_path / "ledger.jsonl")) as sim:
            self.sim = sim
            yield

    def adapter(self) -> ToolAdapter:
        return RefundAdapter(RefundAdapterSettings(url=self.sim.url, api_key=KEY, connect_timeout_ms=300,
                                                   read_timeout_ms=1000))

    def arguments(self, n: int) -> dict[str, Any]:
        return {"orderId": f"order-{n:03d}", "amountMinor": 1000 + n, "currency": "EUR"}

    def invalid_arguments(self) -> dict[str, Any]:
        return {"orderId": "order-x", "amountMinor": -5, "currency": "EUR"}

    def effects(self, request: ToolRequest) -> int:
        return sum(1 for refund in self.sim.ledger() if refund.idempotency_key == request.idempotency_key)

    @contextmanager
    def provider_down(self) -> Iterator[None]:
        port = int(self.sim.url.rsplit(":", 1)[1])
        self.sim.stop()  # connections refused
        try:
            yield
        finally:
            self.sim.settings = dataclasses.replace(self.sim.settings, port=port)
            self.sim.start()


class _Provider:
    """A provider with idempotency keys, as a registered tool's real API would be."""

    def __init__(self) -> None:
        self.done: dict[str, dict[str, Any]] = {}
        self.count: dict[str, int] = {}
        self.by_request: dict[str, str] = {}
        self.down = False
        self.lock = threading.Lock()

    def charge(self, key: str, request_id: str, account: str, amount_minor: int) -> dict[str, Any]:
        if self.down:
            raise ConnectionRefusedError("provider unreachable")
        with self.lock:
            self.by_request[request_id] = key
            if key not in self.done:
                self.count[key] = self.count.get(key, 0) + 1
                self.done[key] = {"chargeId": f"ch-{len(self.done) + 1}", "amountMinor": amount_minor}
            return self.done[key]

    def find(self, request_id: str) -> dict[str, Any] | None:
        if self.down:
            raise ConnectionRefusedError("provider unreachable")
        key = self.by_request.get(request_id)
        return None if key is None else self.done.get(key)


def _registry(provider: _Provider) -> ToolRegistry:
    registry = ToolRegistry("contract")

    @registry.tool("billing.charge", risk="medium", required_role="agent")
    def charge(account: str, amount_minor: int, ctx: ToolContext) -> dict[str, Any]:
        return provider.charge(ctx.idempotency_key, ctx.external_request_id, account, amount_minor)

    @registry.lookup("billing.charge")
    def find(ctx: LookupContext) -> dict[str, Any] | None:
        return provider.find(ctx.external_request_id)

    return registry


class TestRegisteredToolKeepsTheContract(ToolAdapterContract):
    """A `@registry.tool` with a lookup over a provider that honours idempotency keys."""

    capability_id = "billing.charge"

    @pytest.fixture(autouse=True)
    def _provider(self) -> None:
        self.provider = _Provider()

    def adapter(self) -> ToolAdapter:
        return _registry(self.provider).adapters()["billing.charge"]

    def arguments(self, n: int) -> dict[str, Any]:
        return {"account": f"acct-{n}", "amount_minor": 100 + n}

    def invalid_arguments(self) -> dict[str, Any]:
        return {"account": "acct-1", "amount_minor": "a lot"}

    def effects(self, request: ToolRequest) -> int:
        return self.provider.count.get(request.idempotency_key, 0)

    @contextmanager
    def provider_down(self) -> Iterator[None]:
        self.provider.down = True
        try:
            yield
        finally:
            self.provider.down = False


class _ChargesTwice:
    """An adapter that ignores the idempotency key: each execute is a new effect."""

    def __init__(self) -> None:
        self.effects: dict[str, int] = {}

    def execute(self, request: ToolRequest) -> ToolOutcome:
        n = self.effects[request.idempotency_key] = self.effects.get(request.idempotency_key, 0) + 1
        return ToolCompleted(result_ref=f"r-{n}", result_hash="0" * 64, provider_status="ok",
                             verification="confirmed_success", result=f'{{"n": {n}}}')

    def lookup(self, external_request_id: str) -> Any:
        raise ConnectionError("not implemented")

    def cancel(self, external_request_id: str) -> bool:
        return False


def test_the_suite_fails_an_adapter_that_breaks_a_rule() -> None:
    broken = _ChargesTwice()

    class Held(ToolAdapterContract):
        def adapter(self) -> ToolAdapter:
            return broken

        def arguments(self, n: int) -> dict[str, Any]:
            return {"n": n}

        def invalid_arguments(self) -> dict[str, Any]:
            return {}

        def effects(self, request: ToolRequest) -> int:
            return broken.effects.get(request.idempotency_key, 0)

        def provider_down(self) -> Any:
            return contextmanager(lambda: iter([None]))()

    with pytest.raises(AssertionError, match="rule 2"):
        Held().test_the_same_key_twice_is_one_effect()
    with pytest.raises(ConnectionError):  # rule 1's lookup raises: the suite does not swallow it
        Held().test_a_completed_execute_can_be_looked_up()


def test_the_docs_example_runs_the_suite(tmp_path: Path) -> None:
    import re
    import subprocess
    import sys
    doc = (Path(__file__).resolve().parents[3] / "docs" / "tools.md").read_text()
    section = doc.split("## Holding an adapter to the rules", 1)[1]
    (tmp_path / "test_charge_adapter.py").write_text(re.findall(r"```python\n(.*?)```", section, re.S)[0])
    run = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:randomly", "-p", "no:cacheprovider",
                          str(tmp_path / "test_charge_adapter.py")], capture_output=True, text=True, cwd=tmp_path)
    assert "5 passed" in run.stdout, run.stdout + run.stderr
