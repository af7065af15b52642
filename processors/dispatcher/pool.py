"""Where tool calls run once they leave the engine transaction: a bounded thread pool (shell).

The dispatcher's engine thread claims a call (the claim is a fact first), starts the adapter
call here and commits; the call runs on one of `threads` threads while the partition goes on.
A timer of the call (`done:<toolCallId>`) polls its future and reports the outcome in a later
transaction. Futures are kept by (run, call, attempt, try), so a batch the engine replays in
this process re-reports the same outcome and never starts a second call; a process that
dies takes its futures with it, and the next incarnation reports the call `result_unknown`.
Calls beyond `threads` wait in the pool's queue (they are claimed, not yet sent).
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor, wait
from typing import Any

Memo = tuple[str, str, int, int]
KEEP = 10_000


class ToolPool:
    """A bounded pool of tool calls by memo key; `in_flight` counts calls not yet finished."""

    def __init__(self, threads: int = 8, keep: int = KEEP) -> None:
        if threads < 1:
            raise ValueError(f"threads={threads}: expected at least 1")
        self.threads = threads
        self._pool = ThreadPoolExecutor(max_workers=threads, thread_name_prefix="runfacts-dispatch")
        self._futures: OrderedDict[Memo, Future[Any]] = OrderedDict()
        self._keep = keep
        self._lock = threading.Lock()
        self._running = 0  # futures started and not done: kept by their callbacks, not counted per read

    def start(self, memo: Memo, call: Callable[..., Any], *args: Any) -> Future[Any]:
        """The call's future: started now, or the one already started for `memo`."""
        with self._lock:
            future = self._futures.get(memo)
            if future is not None:
                return future
            future = self._futures[memo] = self._pool.submit(self._counted, call, *args)
            self._running += 1
            self._trim()
            return future

    def _counted(self, call: Callable[..., Any], *args: Any) -> Any:
        """Runs `call`; it no longer counts as in flight before its future is done (whoever saw
        it done sees the count without it)."""
        try:
            return call(*args)
        finally:
            with self._lock:
                self._running -= 1

    def get(self, memo: Memo) -> Future[Any] | None:
        with self._lock:
            return self._futures.get(memo)

    @property
    def in_flight(self) -> int:
        """Calls started and not finished (a counter: no walk over the kept futures)."""
        with self._lock:
            return self._running

    def wait_idle(self, timeout: float) -> bool:
        """Wait until every started call finished (tests); False when some still run."""
        with self._lock:
            running = [f for f in self._futures.values() if not f.done()]
        done, _ = wait(running, timeout=timeout)
        return len(done) == len(running)

    def _trim(self) -> None:
        if len(self._futures) <= self._keep:  # nothing to drop: no walk over every kept future per call
            return
        done = [m for m, f in self._futures.items() if f.done()]
        for memo in done[:max(0, len(self._futures) - self._keep)]:
            del self._futures[memo]

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)
