"""Where a decider command's CPU goes, broker-free (docs/decider.md "Speed"): the real `DeciderShell` with the
user view on the engine's `TestDriver`, `decider_load`'s commands in batches (one transaction
each, as the engine's commit interval groups them), `process_time` around each stage, and the
garbage collector's collections by generation (`gc.callbacks`).

    .venv/bin/python benchmarks/decider_stages.py [--commands 12000] [--runs 300] [--batch 300]
    .venv/bin/python benchmarks/decider_stages.py --age 4096 --runs 30 --commands 3000 [--rocks]

With `--age N`: the runs are created and aged with N UpdateProgress each first (untimed, as
`decider_curves.py age` ages them), then `--commands` UpdateProgress are timed: a command's cost
against its run's history. `--rocks` keeps the state in RocksDB (the worker's backend) instead
of the driver's dict.

Prints µs per command: read + validate, load, decide + fold, emit events, timers, state JSON,
user view, and the rest (the engine's task and the driver), then the GC's share.
"""

from __future__ import annotations

import argparse
import gc
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))
from datetime import UTC, datetime, timedelta  # noqa: E402

from decider_load import AGENT, CTX, USER, VERSIONS, _command, generate  # noqa: E402

import runfacts.processors.decider.app as shell  # noqa: E402
import runfacts.processors.engine.testdriver as testdriver  # noqa: E402
from runfacts.processors.engine.gctune import tune_gc  # noqa: E402
from runfacts.processors.engine.store import RocksBackend, StoreMemory  # noqa: E402
from runfacts.processors.engine.testdriver import InputRecord, TestDriver  # noqa: E402
from runfacts.projections.user_view import publisher  # noqa: E402
from runfacts.schemas import codec  # noqa: E402
from runfacts.schemas import commands as cmd  # noqa: E402
from runfacts.schemas.common import BudgetAmounts  # noqa: E402
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


def aged(names: TopicNames, runs: int, age: int, commands: int) -> tuple[list[InputRecord], list[InputRecord]]:
    """(CreateRun + `age` UpdateProgress per run, then `commands` UpdateProgress), round-robin."""
    t0, n = datetime.now(UTC).replace(microsecond=0), 0
    ids = [f"run-{r:05d}" for r in range(runs)]

    def record(command: Any) -> InputRecord:
        return InputRecord(names.commands, command.runId.encode(), codec.encode(command))

    def progress(run: str, tag: str) -> InputRecord:
        nonlocal n
        n += 1
        return record(_command(cmd.UpdateProgress, AGENT, run, n, t0 + timedelta(milliseconds=n),
                               nextSafeAction=tag))

    history = [record(_command(cmd.CreateRun, USER, run, 0, t0, goalRef="goal-1", goalSummary="age",
                               userId="customer-42", budget=BudgetAmounts(), versions=VERSIONS)) for run in ids]
    history += [progress(run, f"age-{i}") for i in range(age) for run in ids]
    return history, [progress(ids[i % runs], f"timed-{i}") for i in range(commands)]


def _rocks_backends(root: Path) -> None:
    """The driver's partitions in RocksDB under `root` (within one `StoreMemory`, as the worker)."""
    memory, made = StoreMemory(64), [0]

    def backend(stores: Any) -> Any:
        made[0] += 1
        return RocksBackend(root / str(made[0]), stores, memory)

    testdriver.MemoryBackend = backend  # type: ignore[assignment,misc]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--commands", type=int, default=12_000)
    parser.add_argument("--runs", type=int, default=300)
    parser.add_argument("--batch", type=int, default=300)
    parser.add_argument("--age", type=int, default=None, help="time UpdateProgress on runs aged N commands")
    parser.add_argument("--rocks", action="store_true", help="state in RocksDB, not the driver's dict")
    args = parser.parse_args()
    names = TopicNames("stages")
    history: list[InputRecord] = []
    if args.age is None:
        records = [InputRecord(names.commands, key, value) for key, value in generate(args.commands, args.runs)]
    else:
        history, records = aged(names, args.runs, args.age, args.commands)
    if args.rocks:
        _rocks_backends(Path(tempfile.mkdtemp(prefix="decider-stages-")))
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
    for i in range(0, len(history), args.batch):  # the runs' past: not timed
        driver.pipe_batch(history[i:i + args.batch])
        driver.log.logs.clear()
    SPENT.clear()
    tune_gc(50_000)  # as the engine does
    _gc_timer()
    start = time.process_time()
    for i in range(0, len(records), args.batch):
        driver.pipe_batch(records[i:i + args.batch])
        driver.log.logs.clear()  # the driver's in-memory Kafka: not the decider's cost
    total, n = time.process_time() - start, len(records)
    load = Path("/proc/loadavg").read_text().split()[:3]
    aged_as = "" if args.age is None else f"aged {args.age}, "
    print(f"{total / n * 1e6:.0f} CPU-µs a command ({n} commands, {args.runs} runs, {aged_as}"
          f"batches of {args.batch}; load {load})")
    for label, spent in SPENT.items():
        print(f"  {label:16s} {spent / n * 1e6:6.1f}")
    print(f"  {'engine + driver':16s} {(total - sum(SPENT.values())) / n * 1e6:6.1f}")
    found = ", ".join(f"{g}: {GC_COUNT[g]} collections, {GC_SPENT[g] / n * 1e6:.1f} µs" for g in sorted(GC_COUNT))
    print(f"  GC by generation (in the loop): {found or 'none'}")


if __name__ == "__main__":
    main()
