"""A registered tool as the dispatcher's `ToolAdapter` (shell: runs the tool's code).

Every way a tool can end becomes a typed outcome, never an exception into the dispatcher.
The rule (SEMANTICS.md §14): for a tool with side effects, only an ending that proves the
effect did not happen is a failure; every other ending is unknown and reconciled.
- returned a value -> `ToolCompleted` (result = canonical JSON of the typed result);
- arguments that do not fit the model -> `ToolFailed(validation, invalid_arguments)` naming
  the tool and each bad field; the function is not called;
- `raise ToolError(code, retryable=...)` (its default `happened=False`: the tool declares
  the effect did not happen) -> `ToolFailed` with that class;
- `raise ToolError(..., happened=True)`, `raise OutcomeUnknown(...)`, no answer within
  `timeout_s`, a value that does not fit the return type, or ANY other exception
  (ConnectionResetError, ConnectionRefusedError, TimeoutError, httpx/requests errors, a
  bug) -> `ToolUnknown` (result_unknown, reconciled by the lookup; without one, a person);
- a read-only or idempotent tool (`read_only=True` / `idempotent=True`: re-running it is
  safe) instead turns those endings into `ToolFailed(transient)`, retried per its retry
  policy with the same key; a value that does not fit is `ToolFailed(tool_exception)`.
Sync functions run on the runtime's thread pool, async ones on its event loop thread; the
caller waits at most `timeout_s`. What this process completed is remembered (bounded) so a
verification or reconciliation lookup finds it even when the tool has no lookup of its own.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import threading
from collections import OrderedDict
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import wait as wait_for
from typing import Any

from runfacts.processors.dispatcher.adapters import (
    FoundCompleted,
    FoundFailed,
    LookupOutcome,
    LookupUnknown,
    NotFound,
    ToolCompleted,
    ToolFailed,
    ToolOutcome,
    ToolRequest,
    ToolUnknown,
    Verification,
)
from runfacts.processors.policy.retry import ErrorClass, canonical_json
from runfacts.tools.errors import OutcomeUnknown, ToolError
from runfacts.tools.spec import LookupContext, ToolContext, ToolSpec

log = logging.getLogger("runfacts.tools")
REMEMBERED = 10_000
DETAIL_CHARS = 400


class ToolRuntime:
    """Where tool code runs: a bounded thread pool (sync tools) and one event loop (async)."""

    def __init__(self, threads: int = 8) -> None:
        self.pool = ThreadPoolExecutor(max_workers=threads, thread_name_prefix="runfacts-tool")
        self._loop: asyncio.AbstractEventLoop | None = None
        self._lock = threading.Lock()

    def submit(self, function: Callable[..., Any], is_async: bool, kwargs: dict[str, Any],
               args: tuple[Any, ...] = ()) -> Future[Any]:
        """Start the function; its future holds the return value or the exception."""
        if is_async:
            return asyncio.run_coroutine_threadsafe(function(*args, **kwargs), self.loop())
        return self.pool.submit(function, *args, **kwargs)

    def loop(self) -> asyncio.AbstractEventLoop:
        with self._lock:
            if self._loop is None:
                loop = asyncio.new_event_loop()
                threading.Thread(target=loop.run_forever, name="runfacts-tool-loop", daemon=True).start()
                self._loop = loop
            return self._loop

    def close(self) -> None:
        self.pool.shutdown(wait=False, cancel_futures=True)
        if self._loop is not None:
            self._loop.call_soon_threadsafe(self._loop.stop)


_DEFAULT: ToolRuntime | None = None


def default_runtime() -> ToolRuntime:
    """The process's shared runtime (created on first use)."""
    global _DEFAULT
    if _DEFAULT is None:
        _DEFAULT = ToolRuntime()
    return _DEFAULT


class RegisteredTool:
    """`ToolAdapter` for one decorated tool (see the module docstring)."""

    def __init__(self, spec: ToolSpec, runtime: ToolRuntime | None = None) -> None:
        self.spec = spec
        self.runtime = runtime or default_runtime()
        self._done: OrderedDict[str, FoundCompleted] = OrderedDict()
        self._lock = threading.Lock()

    def execute(self, request: ToolRequest) -> ToolOutcome:
        """Validate the arguments, run the tool once, turn how it ended into an outcome."""
        spec = self.spec
        try:
            args = spec.arguments(request.arguments)
        except ValueError as exc:
            return ToolFailed.of(ErrorClass.VALIDATION, "invalid_arguments", detail=str(exc)[:DETAIL_CHARS])
        ctx = ToolContext(request.tool_call_id, request.capability_id, request.idempotency_key,
                          request.external_request_id, request.attempt, request.lease_epoch)
        future = self.runtime.submit(spec.function, spec.is_async, spec.call_args(args, ctx))
        future.add_done_callback(lambda done: self._remember_late(request.external_request_id, done))
        if not wait_for([future], timeout=spec.timeout_s).done:  # (a TimeoutError the tool raised is its own)
            return self._unknown("timeout", f"tool {spec.id} gave no answer within {spec.timeout_s:g} s")
        try:
            value = future.result()
        except BaseException as exc:  # noqa: BLE001 - every ending becomes an outcome
            return self._raised(exc)
        return self._completed(request.external_request_id, value)

    def _completed(self, request_id: str, value: Any) -> ToolOutcome:
        try:
            result = self.spec.result_json(value)
        except ValueError as exc:
            if self.spec.manifest.reruns_safely:  # a bug: running it again returns the same value
                return ToolFailed.of(ErrorClass.TOOL_EXCEPTION, "bad_result", detail=str(exc)[:DETAIL_CHARS])
            return ToolUnknown(reason=f"{exc}; the tool returned, so it may have acted"[:DETAIL_CHARS])
        found = self._found(request_id, result)
        with self._lock:
            self._done[request_id] = found
            while len(self._done) > REMEMBERED:
                self._done.popitem(last=False)
        return ToolCompleted(result_ref=found.result_ref, result_hash=found.result_hash,
                             provider_status="completed", verification=found.verification,
                             result=result)

    def _found(self, request_id: str, result: str | None) -> FoundCompleted:
        # pins the value to its request; not a plain digest of the (personal) value itself
        digest = hashlib.sha256(canonical_json({"externalRequestId": request_id, "result": result})).hexdigest()
        return FoundCompleted(result_ref=f"{self.spec.id}:{request_id}", result_hash=digest,
                              provider_status="completed",
                              verification=Verification.CONFIRMED_SUCCESS, result=result)

    def _remember_late(self, request_id: str, future: Future[Any]) -> None:
        """A tool that answered after the caller stopped waiting: keep it for the lookup."""
        if future.cancelled() or future.exception() is not None:
            return
        with self._lock:
            known = request_id in self._done
        if not known:
            try:
                self._completed(request_id, future.result())
            except ValueError:  # a result that does not fit: execute reports it
                return

    def _raised(self, exc: BaseException) -> ToolOutcome:
        """How a raised exception ends the call (the module docstring's rule)."""
        spec = self.spec
        if isinstance(exc, ToolError) and not exc.happened:  # declared: the effect did not happen
            return ToolFailed(error_class=exc.error_class, retryable=exc.retryable, code=exc.code,
                              detail=f"tool {spec.id}: {exc}"[:DETAIL_CHARS],
                              retry_after_ms=exc.retry_after_ms)
        if isinstance(exc, ToolError | OutcomeUnknown):
            code = exc.code if isinstance(exc, ToolError) else "outcome_unknown"
            return self._unknown(code, f"tool {spec.id}: {exc}")
        log.error("tool %s raised %s", spec.id, type(exc).__name__, exc_info=exc)
        return self._unknown(type(exc).__name__, f"tool {spec.id} raised {type(exc).__name__}: {exc}")

    def _unknown(self, code: str, why: str) -> ToolOutcome:
        """An ending that does not prove the effect did not happen: unknown for a tool with side
        effects; a retryable failure for one that is safe to run again (read-only, idempotent)."""
        why = why[:DETAIL_CHARS - 50]  # what follows is never cut off
        if self.spec.manifest.reruns_safely:
            return ToolFailed.of(ErrorClass.TRANSIENT, code, detail=f"{why}; safe to run again")
        return ToolUnknown(reason=f"{why}; the effect may have happened: reconcile")

    def lookup(self, external_request_id: str) -> LookupOutcome:
        """What this process remembers, else the tool's lookup: found, not found, or unknown."""
        with self._lock:
            known = self._done.get(external_request_id)
        if known is not None:
            return known
        if self.spec.lookup is None:
            return LookupUnknown(reason=f"tool {self.spec.id} has no lookup and this dispatcher did "
                                        f"not run {external_request_id}: register "
                                        f"@registry.lookup({self.spec.id!r})", retryable=False)
        ctx = LookupContext(self.spec.id, external_request_id)
        lookup = self.spec.lookup
        future = self.runtime.submit(lookup, asyncio.iscoroutinefunction(lookup), {}, (ctx,))
        if not wait_for([future], timeout=self.spec.timeout_s).done:
            return LookupUnknown(reason=f"lookup of {self.spec.id} gave no answer in time", retryable=True)
        try:
            value = future.result()
        except BaseException as exc:  # noqa: BLE001
            return self._lookup_raised(exc)
        if value is None:
            return NotFound()
        try:
            return self._found(external_request_id, self.spec.result_json(value))
        except ValueError as exc:
            return LookupUnknown(reason=str(exc)[:DETAIL_CHARS], retryable=False)

    def _lookup_raised(self, exc: BaseException) -> LookupOutcome:
        if isinstance(exc, ToolError):
            return FoundFailed(error_class=exc.error_class, code=exc.code, detail=str(exc)[:DETAIL_CHARS])
        retryable = not isinstance(exc, ToolError)  # a lookup changes nothing: ask again later
        return LookupUnknown(reason=f"lookup of {self.spec.id} raised {type(exc).__name__}: {exc}"[:DETAIL_CHARS],
                             retryable=retryable)

    def cancel(self, external_request_id: str) -> bool:
        """Registered tools cannot be cancelled: the dispatcher then looks the request up."""
        return False
