"""Where a decider command's CPU goes, broker-free (issue 24): the real `DeciderShell` with the
user view on the engine's `TestDriver`, `decider_load`'s commands in batches (one transaction
each, as the engine's commit interval groups them), `process_time` around each stage, and the
garbage collector's collections by generation (`gc.callbacks`).

    .venv/bin/python benchmarks/decider_stages.py [--commands 12000] [--runs 300] [--batch 300]

Prints µs per command: read + validate, load, decide + fold, emit events, timers, state JSON,
user view, and the rest (the engine's task and the driver), then the GC's share.
"""

from __future__ import annotations

import argparse
import gc
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))
from decider_load import CTX, generate  # noqa: E402

import runfacts.processors.decider.app as shell  # noqa: E402
from runfacts.processors.engine.gctune import tune_gc  # noqa: E402
from runfacts.processors.engine.testdriver import InputRecord, TestDriver  # noqa: E402
from runfacts.projections.user_view import publisher  # noqa: E402
from runfacts.topics import TopicNames  # noqa: E402

SPENT: Counter[str] = Counter()
GC_SPENT: Counter[int] = Counter()
GC_COUNT: Counter[int] = Counter()


def timed(owner: Any, name: str, label: str) -> None:
    """Replace `owner.name` by a wrapper that adds its CPU time to SPENT[label]."""
    inner = getattr(owner, name)

    def wrapper(*args: Any, **kwargs: Any) -> Any:
        start = time.process_time()
        try:
            return inner(*args, **kwargs)
        finally:
            SPENT[label] += time.process_time() - start

    setattr(owner, name, wrapper)


def _gc_timer() -> None:
    started = [0.0]

    def callback(phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            started[0] = time.process_time()
            return
        GC_SPENT[info["generation"]] += time.process_time() - started[0]
        GC_COUNT[info["generation"]] += 1

    gc.callbacks.append(callback)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--commands", type=int, default=12_000)
    parser.add_argument("--runs", type=int, default=300)
    parser.add_argument("--batch", type=int, default=300)
    args = parser.parse_args()
    names = TopicNames("stages")
    records = [InputRecord(names.commands, key, value) for key, value in generate(args.commands, args.runs)]
    for owner, name, label in ((shell, "decide_evolve", "decide + fold"), (shell, "dump_state", "state JSON"),
                               (shell.DeciderShell, "deserialize", "read + validate"),
                               (shell.DeciderShell, "_emit_event", "emit events"),
                               (shell.DeciderShell, "_plan_timers", "timers"),
                               (shell.DeciderShell, "_current", "load")):
        timed(owner, name, label)
    view = publisher(names.user_view)

    def user_view(state: Any) -> Any:
        start = time.process_time()
        try:
            return list(view(state))
        finally:
            SPENT["user view"] += time.process_time() - start

    driver = TestDriver(shell.DeciderShell(names, CTX, views=(user_view,)).application(),
                        start_ms=int(time.time() * 1000))
    tune_gc(50_000)  # as the engine does
    _gc_timer()
    start = time.process_time()
    for i in range(0, len(records), args.batch):
        driver.pipe_batch(records[i:i + args.batch])
        driver.log.logs.clear()  # the driver's in-memory Kafka: not the decider's cost
    total, n = time.process_time() - start, len(records)
    load = Path("/proc/loadavg").read_text().split()[:3]
    print(f"{total / n * 1e6:.0f} CPU-µs a command ({n} commands, {args.runs} runs, "
          f"batches of {args.batch}; load {load})")
    for label, spent in SPENT.items():
        print(f"  {label:16s} {spent / n * 1e6:6.1f}")
    print(f"  {'engine + driver':16s} {(total - sum(SPENT.values())) / n * 1e6:6.1f}")
    found = ", ".join(f"{g}: {GC_COUNT[g]} collections, {GC_SPENT[g] / n * 1e6:.1f} µs" for g in sorted(GC_COUNT))
    print(f"  GC by generation (in the loop): {found or 'none'}")


if __name__ == "__main__":
    main()
