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

import gc

__all__ = ["tune_gc"]


def tune_gc(threshold: int) -> None:
    """Freeze what is alive now and raise the young-generation threshold (0: do nothing)."""
    if threshold <= 0:
        return
    gc.collect()
    gc.freeze()
    _, older, oldest = gc.get_threshold()
    gc.set_threshold(threshold, older, oldest)
