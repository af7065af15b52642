"""Garbage-collector tuning for a long-running engine process.

CPython collects its youngest generation every 700 net allocations of container objects, and
every tenth young collection also walks the next generation. A stream processor allocates a
few dozen short-lived objects per record (decoded models, dicts, tuples) and keeps a large,
stable heap (run states, caches, compiled codecs), so the default thresholds spend a quarter of
the decider's CPU walking objects that are neither garbage nor cyclic (measured with
benchmarks/decider_bench_app.py: 11.2k -> 15.9k events per CPU-second in the broker-free
harness). Two steps, both standard practice for long-running CPython services:

  * `gc.freeze()` once the application is built: everything alive then (modules, schemas,
    compiled readers, settings) moves to the permanent generation and is never walked again.
  * a larger young-generation threshold (EngineSettings.gc_threshold, default 50 000): still a
    bounded amount of garbage between collections (cycles are rare here: records are trees),
    collected about seventy times less often.

The settings are process-wide, which is what a one-engine-per-process worker wants; 0 leaves
the interpreter's defaults (for embedding the engine in a process that tunes its own GC).
"""

from __future__ import annotations

import ctypes
import functools
import gc
import threading
from typing import Any

__all__ = ["HeapTrimmer", "limit_arenas", "trim_heap", "tune_gc"]


def tune_gc(threshold: int) -> None:
    """Freeze what is alive now and raise the young-generation threshold (0: do nothing)."""
    if threshold <= 0:
        return
    gc.collect()
    gc.freeze()
    _, older, oldest = gc.get_threshold()
    gc.set_threshold(threshold, older, oldest)


_M_ARENA_MAX = -8  # glibc's mallopt parameter (malloc.h)


@functools.cache
def _libc() -> Any | None:
    """The process's C library when it is glibc (malloc_trim and mallopt), else None."""
    try:
        libc = ctypes.CDLL(None)
        libc.malloc_trim.argtypes, libc.mallopt.argtypes = [ctypes.c_size_t], [ctypes.c_int, ctypes.c_int]
    except (OSError, AttributeError):  # not glibc (musl, macOS): nothing to tune
        return None
    return libc


def limit_arenas(arenas: int) -> bool:
    """At most `arenas` malloc arenas from now on (glibc's M_ARENA_MAX; 0: do nothing). False
    where the C library is not glibc."""
    libc = _libc()
    if arenas <= 0 or libc is None:
        return False
    return bool(libc.mallopt(_M_ARENA_MAX, arenas))


def trim_heap() -> bool:
    """Give the free pages of every malloc arena back to the OS (glibc's malloc_trim(0)); True
    when memory was released, False when none was or the C library is not glibc."""
    libc = _libc()
    return libc is not None and bool(libc.malloc_trim(0))


class HeapTrimmer:
    """A daemon thread that calls `trim_heap` every `interval_s` (off the engine's loop: ctypes
    releases the GIL during the call). `stop()` ends it; on a C library without malloc_trim it
    never starts."""

    def __init__(self, interval_s: float) -> None:
        self._stop = threading.Event()
        self._interval_s = interval_s
        self.trims = 0
        self._thread = threading.Thread(target=self._run, name="runfacts-heap-trim", daemon=True)
        if interval_s > 0 and _libc() is not None:
            self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(self._interval_s):
            trim_heap()
            self.trims += 1

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()
