"""The pieces the test stack puts around the real decider and dispatcher (shell): an in-memory
argument store, a tool runtime that runs sync tools inline, and the tool wrapper that injects
faults and counts executions.

The wrapper's lookups go to a second adapter of the same tool, one that never ran a call: so a
lost response is reconciled through the tool's own lookup (`@registry.lookup`), as it is after
a dispatcher restart, never through the executing adapter's memory of what it answered.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any

from runfacts.processors.dispatcher.adapters import (
    ArgsMissing,
    ArgsTampered,
    LookupOutcome,
    ToolAdapter,
    ToolOutcome,
    ToolRequest,
    ToolUnknown,
)
from runfacts.processors.policy.retry import args_hash
from runfacts.tools.adapter import ToolRuntime

LOST = "runfacts.testing: the response was lost (lose_response)"


class SimulatedCrash(BaseException):  # noqa: N818 - a process death, not an error to handle
    """Raised at an armed crash point: the dispatcher 'dies' there, nothing of its open
    transaction is committed, and the stack restarts it as a new incarnation."""


class MemoryArgs:
    """The argument store (`ArgsReader`) in memory: content-addressed `args-<sha256>`."""

    def __init__(self) -> None:
        self.stored: dict[str, dict[str, Any]] = {}

    def put(self, arguments: dict[str, Any]) -> tuple[str, str]:
        digest = args_hash(arguments)
        ref = f"args-{digest}"
        self.stored[ref] = dict(arguments)
        return ref, digest

    def load_verified(self, ref: str, expected_hash: str) -> dict[str, Any]:
        if ref not in self.stored:
            raise ArgsMissing(ref)
        arguments = self.stored[ref]
        actual = args_hash(arguments)
        if actual != expected_hash:
            raise ArgsTampered(ref, expected_hash, actual)
        return arguments


class InlineRuntime(ToolRuntime):
    """Sync tools run in the caller's thread (no pool; a tool's `timeout_s` is not enforced);
    async tools on the runtime's event loop thread, as in the dispatcher."""

    def __init__(self) -> None:
        super().__init__(threads=1)

    def submit(self, function: Callable[..., Any], is_async: bool, kwargs: dict[str, Any],
               args: tuple[Any, ...] = ()) -> Future[Any]:
        if is_async or asyncio.iscoroutinefunction(function):
            return super().submit(function, True, kwargs, args)
        done: Future[Any] = Future()
        try:
            done.set_result(function(*args, **kwargs))
        except BaseException as exc:  # noqa: BLE001 - the adapter turns it into an outcome
            done.set_exception(exc)
        return done


@dataclass
class Faults:
    """Armed faults: lost responses by capability (how many left), the crash point."""

    lose: dict[str, int] = field(default_factory=dict)
    crash_at: str = ""

    def take_lost(self, capability: str) -> bool:
        left = self.lose.get(capability, 0)
        if left <= 0:
            return False
        self.lose[capability] = left - 1
        return True


class TestedTool:
    """A served tool as the test stack wraps it: counts, faults, lookups through a fresh adapter."""

    __test__ = False

    def __init__(self, capability: str, inner: ToolAdapter, fresh: Callable[[], ToolAdapter], faults: Faults,
                 executed: list[ToolRequest], lookups: list[str]) -> None:
        self.capability, self.inner, self._fresh, self.faults = capability, inner, fresh, faults
        self.executed, self.lookups = executed, lookups
        self._looker: ToolAdapter | None = None

    def execute(self, request: ToolRequest) -> ToolOutcome:
        self.executed.append(request)
        outcome = self.inner.execute(request)
        if self.faults.take_lost(self.capability):
            return ToolUnknown(reason=LOST)
        return outcome

    def lookup(self, external_request_id: str) -> LookupOutcome:
        self.lookups.append(external_request_id)
        if self._looker is None:
            self._looker = self._fresh()
        return self._looker.lookup(external_request_id)

    def cancel(self, external_request_id: str) -> bool:
        return self.inner.cancel(external_request_id)
