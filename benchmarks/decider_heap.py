"""What the run decider's memory grows with, broker-free (docs/decider.md "Speed"): the real `DeciderShell`
on the engine's `TestDriver`, but on `RocksBackend`s under one `StoreMemory` as the engine
builds them (6 partitions), fed CreateRun-only runs as `decider_curves.py rss` sends them.
At each count: RSS (/proc/self/status), the block cache's usage, the engine's read caches
(keys, value bytes) and the decider's parsed-state cache; with `--trace-from N`, tracemalloc
starts at N runs and the growth between the next two counts is listed by traceback.

    .venv/bin/python benchmarks/decider_heap.py --counts 50000 100000 150000
    .venv/bin/python benchmarks/decider_heap.py --counts 70000 74000 84000 --trace-from 70000

No Kafka client here: the difference from the worker's RSS at the same count is librdkafka's
(prefetch, producer queues) and its threads' malloc arenas.
"""

from __future__ import annotations

import argparse
import dataclasses
import gc
import sys
import tempfile
import time
import tracemalloc
import uuid
from datetime import UTC, datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from decider_load import CTX  # noqa: E402
from view_latency_bench import AGENT, ENCODE  # noqa: E402

import runfacts.processors.decider.app as shell  # noqa: E402
from runfacts.processors.decider.context import DEFAULT_VERSIONS  # noqa: E402
from runfacts.processors.engine.gctune import limit_arenas, trim_heap, tune_gc  # noqa: E402
from runfacts.processors.engine.store import RocksBackend, StoreMemory  # noqa: E402
from runfacts.processors.engine.task import Task  # noqa: E402
from runfacts.processors.engine.testdriver import InputRecord, TestDriver  # noqa: E402
from runfacts.schemas import commands as cmd  # noqa: E402
from runfacts.schemas.common import BudgetAmounts  # noqa: E402
from runfacts.topics import TopicNames  # noqa: E402

PAYLOAD = cmd.CreateRun.model_fields["payload"].annotation


def rss_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS"):
            return int(line.split()[1]) / 1024
    return 0.0


def create_run(run: str) -> bytes:
    return ENCODE(cmd.CreateRun(commandId=f"c-{uuid.uuid4().hex}", runId=run, actor=AGENT,
                                issuedAt=datetime.now(UTC), correlationId=run,
                                payload=PAYLOAD(goalRef="goal", goalSummary="rss bench", userId="bench",
                                                budget=BudgetAmounts(), versions=DEFAULT_VERSIONS)))


def caches(driver: TestDriver, decider: shell.DeciderShell) -> str:
    parts = []
    for store in driver.app.all_stores:
        held = [t.state.caches[store] for t in driver.tasks.values()]
        keys = sum(len(c) for c in held)
        size = sum(len(v or b"") + len(k) for c in held for k, v in c.items())
        parts.append(f"{store} {keys:,} keys {size / 2**20:.1f} MB")
    state = decider.cache
    parts.append(f"parsed states {len(state):,} ({state.bytes / 2**20:.1f} MB of JSON)")
    return "read caches: " + ", ".join(parts)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--counts", type=int, nargs="+", default=[50_000, 100_000, 150_000])
    parser.add_argument("--partitions", type=int, default=6)
    parser.add_argument("--memory-mb", type=int, default=64)
    parser.add_argument("--cache-keys", type=int, default=10_000)
    parser.add_argument("--cache-kb", type=int, default=4096)
    parser.add_argument("--arenas", type=int, default=0, help="malloc arenas at most (glibc's M_ARENA_MAX)")
    parser.add_argument("--trace-from", type=int, default=0, help="start tracemalloc at this many runs")
    args = parser.parse_args()
    limit_arenas(args.arenas)
    names = TopicNames("heap")
    decider = shell.DeciderShell(names, dataclasses.replace(CTX, current_versions=DEFAULT_VERSIONS))
    app = decider.application()
    driver = TestDriver(app, partitions=args.partitions, start_ms=int(time.time() * 1000))
    root = Path(tempfile.mkdtemp(prefix="decider-heap-"))
    memory = StoreMemory(args.memory_mb)
    driver.backends = {p: RocksBackend(root / str(p), app.all_stores, memory) for p in range(args.partitions)}
    driver.tasks = {p: Task(app, p, b, driver.log, args.cache_keys, args.cache_kb) for p, b in driver.backends.items()}
    tune_gc(50_000)  # as the engine does
    load = Path("/proc/loadavg").read_text().split()[:3]
    print(f"idle: RSS {rss_mb():.0f} MB; {args.partitions} partitions, {args.memory_mb} MB, "
          f"{args.cache_keys} cache keys, {args.cache_kb} KB; load {load}; state in {root}", flush=True)
    created, snapshots = 0, []
    for count in sorted(args.counts):
        while created < count:
            end = min(count, created + 300)
            driver.pipe_batch([InputRecord(names.commands, f"rss-run-{i}".encode(), create_run(f"rss-run-{i}"))
                               for i in range(created, end)])
            driver.log.logs.clear()  # the driver's in-memory Kafka: not the decider's memory
            created = end
        gc.collect()
        before = rss_mb()
        trim_heap()
        print(f"{count:,} runs: RSS {before:.0f} MB ({rss_mb():.0f} after malloc_trim), "
              f"block cache {memory.usage_mb():.1f} MB; "
              f"{caches(driver, decider)}", flush=True)
        if tracemalloc.is_tracing():
            snapshots.append(tracemalloc.take_snapshot())
        elif args.trace_from and count >= args.trace_from:
            tracemalloc.start(10)
    if len(snapshots) >= 2:
        for stat in snapshots[-1].compare_to(snapshots[0], "traceback")[:10]:
            print(stat)
            print("\n".join(stat.traceback.format()[-6:]))


if __name__ == "__main__":
    main()
