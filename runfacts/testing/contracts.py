"""Contract test suites for the ports a third party implements: hold your tool adapter to the rules.

A `ToolAdapter` (runfacts.processors.dispatcher.adapters: `execute`, `lookup`, `cancel`) is how
the dispatcher reaches a system runfacts does not own. The dispatcher's exactly-once promise
rests on the adapter keeping five rules (docs/tools.md, "Holding an adapter to the rules"):

1. An execute that completes can be looked up: `lookup(external_request_id)` answers
   `FoundCompleted` with the same `result_hash`.
2. The same idempotency key twice is one effect: a second attempt answers the first result's value.
3. A request never sent is never "found completed": `NotFound` or `LookupUnknown`.
4. Nothing raises: a provider that is down gives `ToolFailed` (nothing sent) or `ToolUnknown`
   (may have been sent), and a lookup then gives `LookupUnknown` — never an exception.
5. Arguments the tool refuses fail as `validation`, not retryable, with no effect.

And, for an adapter that passes the lease epoch to its provider (`FencingContract`):
6. A request whose lease epoch is below one already seen for its key changes nothing.

Subclass in your tests (pytest collects the inherited `test_*` methods):

    class TestMyAdapter(ToolAdapterContract):
        def adapter(self): return MyAdapter(...)
        def arguments(self, n): return {"order": f"o-{n}", "amount_minor": 100 + n}
        def invalid_arguments(self): return {"order": "", "amount_minor": -1}
        def effects(self, request): return my_fake_provider.count(request.idempotency_key)
        def provider_down(self): return my_fake_provider.down()   # a context manager

Shell-free: the suite calls only your adapter and your hooks.
"""

from __future__ import annotations

import uuid
from abc import ABC, abstractmethod
from contextlib import AbstractContextManager
from typing import Any

from runfacts.processors.dispatcher.adapters import (
    FoundCompleted,
    LookupUnknown,
    NotFound,
    ToolAdapter,
    ToolCompleted,
    ToolFailed,
    ToolRequest,
    ToolUnknown,
)
from runfacts.processors.policy.retry import ErrorClass


class ToolAdapterContract(ABC):
    """The rules every tool adapter keeps (rules 1-5 of the module docstring)."""

    capability_id = "contract.tool"

    @abstractmethod
    def adapter(self) -> ToolAdapter:
        """A fresh adapter reaching your provider (or a faithful fake of it)."""

    @abstractmethod
    def arguments(self, n: int) -> dict[str, Any]:
        """Valid arguments for call number `n` (distinct calls get distinct `n`)."""

    @abstractmethod
    def invalid_arguments(self) -> dict[str, Any]:
        """Arguments your tool must refuse (a type or bound it declares)."""

    @abstractmethod
    def effects(self, request: ToolRequest) -> int:
        """How many times the provider carried out `request`'s effect (by its idempotency key)."""

    @abstractmethod
    def provider_down(self) -> AbstractContextManager[Any]:
        """While entered, the provider cannot be reached (refused connections or no answers)."""

    def request(self, n: int, *, attempt: int = 1, lease_epoch: int = 1,
                arguments: dict[str, Any] | None = None) -> ToolRequest:
        """Call `n`'s attempt as the dispatcher hands it over (one key per call, one id per attempt)."""
        call = f"contract-{n}-{self._nonce}"
        return ToolRequest(tool_call_id=call, capability_id=self.capability_id,
                           idempotency_key=f"{call}:key", external_request_id=f"{call}-a{attempt}",
                           attempt=attempt, lease_epoch=lease_epoch,
                           arguments=self.arguments(n) if arguments is None else arguments)

    @property
    def _nonce(self) -> str:
        # unique per test: a real provider keeps keys from earlier runs of the suite
        if not hasattr(self, "_contract_nonce"):
            self._contract_nonce = uuid.uuid4().hex[:12]
        return self._contract_nonce

    def test_a_completed_execute_can_be_looked_up(self) -> None:
        adapter, request = self.adapter(), self.request(1)
        done = adapter.execute(request)
        assert isinstance(done, ToolCompleted), f"rule 1: a healthy provider completes the call, got {done!r}"
        found = adapter.lookup(request.external_request_id)
        assert isinstance(found, FoundCompleted), f"rule 1: lookup of a completed request answered {found!r}"
        assert found.result_hash == done.result_hash, "rule 1: lookup must pin the result execute returned"
        assert self.effects(request) == 1

    def test_the_same_key_twice_is_one_effect(self) -> None:
        adapter = self.adapter()
        first, second = self.request(2), self.request(2, attempt=2)
        done = adapter.execute(first)
        again = adapter.execute(second)
        assert isinstance(done, ToolCompleted) and isinstance(again, ToolCompleted), (done, again)
        assert again.result == done.result, "rule 2: a repeated key must answer the first result"
        assert self.effects(second) == 1, "rule 2: a repeated key carried out the effect again"

    def test_a_request_never_sent_is_not_found(self) -> None:
        found = self.adapter().lookup(self.request(3).external_request_id)
        assert isinstance(found, NotFound | LookupUnknown), f"rule 3: an unsent request answered {found!r}"

    def test_nothing_raises_when_the_provider_is_down(self) -> None:
        adapter, request = self.adapter(), self.request(4)
        with self.provider_down():
            outcome = adapter.execute(request)
            assert isinstance(outcome, ToolFailed | ToolUnknown), f"rule 4: provider down answered {outcome!r}"
            if isinstance(outcome, ToolFailed):
                assert outcome.retryable, f"rule 4: an unreachable provider is a retryable failure: {outcome!r}"
            found = adapter.lookup(request.external_request_id)
            assert isinstance(found, LookupUnknown | NotFound), f"rule 4: lookup while down answered {found!r}"
        assert self.effects(request) <= 1

    def test_refused_arguments_fail_as_validation_without_effect(self) -> None:
        request = self.request(5, arguments=self.invalid_arguments())
        outcome = self.adapter().execute(request)
        assert isinstance(outcome, ToolFailed), f"rule 5: refused arguments answered {outcome!r}"
        assert outcome.error_class is ErrorClass.VALIDATION and not outcome.retryable, outcome
        assert self.effects(request) == 0


class FencingContract(ToolAdapterContract):
    """Rule 6, for an adapter whose provider fences stale lease epochs."""

    def test_a_stale_lease_epoch_changes_nothing(self) -> None:
        adapter = self.adapter()
        current, stale = self.request(6, lease_epoch=7), self.request(6, attempt=2, lease_epoch=3)
        done = adapter.execute(current)
        assert isinstance(done, ToolCompleted), done
        outcome = adapter.execute(stale)
        assert isinstance(outcome, ToolFailed) and not outcome.retryable, \
            f"rule 6: a stale epoch must be refused for good, got {outcome!r}"
        assert self.effects(current) == 1


__all__ = ["FencingContract", "ToolAdapterContract"]
