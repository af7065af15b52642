"""One runfacts.client process with N runs waiting at once: its memory, and the latency from a
decided event to the waiting future.

Run: KAFKA_BOOTSTRAP_SERVERS=127.0.0.1:9092 .venv/bin/python benchmarks/client_wait_bench.py \
        [--runs 10000] [--rounds 3] [--partitions 6] [--light 200]

1. starts the run decider (`runfacts worker decider`) on fresh topics, with the demo's refund
   capability (approval required, 10 min TTL);
2. per round: creates --runs runs through one client (Runfacts.connect: one producer, one
   follower) and proposes a refund in each, so each waits for an approval (setup, not timed);
3. has every call wait at once: `await call.result_async()` (one asyncio future per call,
   resolved by the follower; no thread per wait); records the process's RSS while all wait;
4. rejects every approval as a UI would (`decide(..., wait=False)`, sent in one burst from
   another thread, so the event loop is free to resume the waiters);
5. reports, per round, p50/p99/max of (the coroutine resumed after its future resolved) -
   (the decided event's Kafka timestamp: when the decider produced approval.rejected), the
   client's own part of it (resumed - the follower began handling the batch holding the
   event), and the RSS with N waiting; then the median and range of the rounds.
decided -> future includes the decider working through the burst of N rejections and its
transaction commit, the follower's fetch (fetch.wait.max.ms 20) and the asyncio hand-off.
6. first, at light load (--light proposals, one at a time, 50 ms apart, nothing else running):
   propose -> `approval.required` seen by the client: from the `run.propose(...)` call until the
   client's journal holds the call's approval.required (`call.approval_id` set), split into
   propose -> the event's Kafka timestamp (the send and the decider's decision) and the
   event's timestamp -> the follower handling it (the decider's commit, the read_committed
   fetch and the hand-off).
Topics are deleted and the decider stopped at the end.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from runfacts.client import ApprovalRejected, ClientSettings, Runfacts, ToolCall, UiSettings
from runfacts.demo.stack import demo_manifest
from runfacts.schemas import events as ev
from runfacts.settings import KafkaSettings
from runfacts.topics import TopicNames, apply_topics, changelog_spec, delete_topics, runfacts_topics


def rss_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def start_decider(kafka: KafkaSettings, names: TopicNames, workdir: Path) -> subprocess.Popen[bytes]:
    (workdir / "capabilities.toml").write_text(demo_manifest(600_000))
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("RUNFACTS_APPROVAL_KEYS", "RUNFACTS_SOURCE_KEYS"))
           and k != "RUNFACTS_BOOTSTRAP_SERVERS"}
    env.update({"RUNFACTS_KAFKA_BOOTSTRAP_SERVERS": kafka.bootstrap_servers,
                "RUNFACTS_STATE_DIR": str(workdir / "state"), "RUNFACTS_COMMIT_INTERVAL_MS": "50",
                "RUNFACTS_POLL_TIMEOUT_MS": "50"})
    args = [sys.executable, "-m", "runfacts.cli", "worker", "decider", "--prefix", names.prefix,
            "--capabilities", str(workdir / "capabilities.toml")]
    with (workdir / "decider.log").open("ab") as log:
        return subprocess.Popen(args, env=env, stdout=subprocess.DEVNULL, stderr=log)


def setup(rf: Runfacts, runs: int, tag: str, threads: int = 64) -> list[ToolCall]:
    """Create the runs and propose their refunds from `threads` threads (setup is not timed; one
    at a time it is bound by the decider's commit interval, ~2 runs/s on a loaded machine)."""
    def one(i: int) -> ToolCall:
        run = rf.start_run(goal=f"ticket:{tag}-{i}", summary="bench", user_id="u", run_id=f"{tag}-{i}")
        return run.propose("payments.refund", {"orderId": f"o-{tag}-{i}", "amountMinor": 100, "currency": "EUR"},
                           target=f"o-{tag}-{i}")

    with ThreadPoolExecutor(threads) as pool:
        return list(pool.map(one, range(runs)))


def clock_arrivals(rf: Runfacts) -> dict[tuple[bytes, int], float]:
    """When the follower's batch holding each record began to be handled (ms): the start of the
    client's own part of the latency. Wraps the follower's batch handler (benchmark only)."""
    arrived: dict[tuple[bytes, int], float] = {}
    handle = rf.follower._batch  # noqa: SLF001

    def timed(messages: list) -> None:  # type: ignore[type-arg]
        now = time.time() * 1000
        for msg in messages:
            if msg.error() is None:
                arrived[(msg.key() or b"", msg.offset())] = now
        handle(messages)

    rf.follower._batch = timed  # type: ignore[method-assign]  # noqa: SLF001
    return arrived


async def wait_all(rf: Runfacts, calls: list[ToolCall],
                   arrived: dict[tuple[bytes, int], float]) -> tuple[list[float], list[float], float]:
    """Every call awaits its result; then all are rejected. Per call: decided -> future and
    follower -> future in ms; the RSS in MB while all wait."""
    resumed: dict[str, float] = {}

    async def one(call: ToolCall) -> None:
        try:
            await call.result_async(timeout=600)
        except ApprovalRejected:
            resumed[call.id] = time.time() * 1000

    tasks = [asyncio.create_task(one(c)) for c in calls]
    await asyncio.sleep(0.5)  # every coroutine is waiting on its future now
    rss = rss_mb()
    pending = {a.tool_call_id: a for a in rf.approvals()}

    def reject_all() -> None:  # the UI, in its own thread: the event loop only resumes waiters
        for call in calls:
            rf.decide(pending[call.id], "reject", approver="bench-ui", wait=False)

    await asyncio.gather(asyncio.to_thread(reject_all), *tasks)
    latencies, fanout = [], []
    for call in calls:
        decided = next(e for e in call.run.journal.entries if isinstance(e.event, ev.ApprovalRejected))
        latencies.append(resumed[call.id] - decided.at_ms)
        fanout.append(resumed[call.id] - arrived[(call.run.id.encode(), decided.offset)])
    return latencies, fanout, rss


def light_load(rf: Runfacts, n: int, arrived: dict[tuple[bytes, int], float]) -> list[tuple[float, float, float]]:
    """n proposals one at a time: (propose -> approval.required in the journal, propose -> the
    event's Kafka timestamp, timestamp -> the follower handling it), in ms."""
    rows = []
    for i in range(n):
        run = rf.start_run(goal=f"ticket:light-{i}", summary="bench", user_id="u", run_id=f"light-{i}")
        time.sleep(0.05)
        t0 = time.time() * 1000
        call = run.propose("payments.refund", {"orderId": f"o-light-{i}", "amountMinor": 100, "currency": "EUR"},
                           target=f"o-light-{i}")
        while call.approval_id is None:  # propose returns once decided; the event is in the journal by then
            time.sleep(0.0005)
        seen = time.time() * 1000
        required = next(e for e in run.journal.entries if isinstance(e.event, ev.ApprovalRequired))
        rows.append((seen - t0, required.at_ms - t0, arrived[(run.id.encode(), required.offset)] - required.at_ms))
    return rows


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=10_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--partitions", type=int, default=6)
    parser.add_argument("--light", type=int, default=200, help="proposals at light load (0: skip)")
    args = parser.parse_args()
    kafka = KafkaSettings()
    names = TopicNames(f"cwb-{uuid.uuid4().hex[:8]}")
    specs = runfacts_topics(names, args.partitions)
    specs += [changelog_spec(f"{names.prefix}-run-decider-{s}-changelog", args.partitions)
              for s in ("orphans", "__timers")]  # `runs`: its changelog is the run-state topic
    apply_topics(kafka, specs)
    workdir = Path(tempfile.mkdtemp(prefix="client-wait-bench-"))
    decider = start_decider(kafka, names, workdir)
    base = rss_mb()
    rows = []
    try:
        rf = Runfacts.connect(kafka=kafka, prefix=names.prefix, args_store=workdir / "args.db",
                              settings=ClientSettings(ui=UiSettings(signing_env={})))
        arrived = clock_arrivals(rf)
        light = light_load(rf, args.light, arrived) if args.light else []
        for name, i in (("propose -> approval.required seen", 0), ("  propose -> event timestamp", 1),
                        ("  event timestamp -> follower", 2)):
            if light:
                values = [r[i] for r in light]
                print(f"light load, {name}: p50 {pct(values, 0.5):.1f} ms, p99 {pct(values, 0.99):.1f} ms, "
                      f"max {max(values):.1f} ms over {len(light)} proposals", flush=True)
        for round_ in range(1, args.rounds + 1):
            t0 = time.monotonic()
            calls = setup(rf, args.runs, f"r{round_}")
            built = time.monotonic() - t0
            latencies, fanout, rss = asyncio.run(wait_all(rf, calls, arrived))
            rows.append((pct(latencies, 0.5), pct(latencies, 0.99), max(latencies), rss,
                         pct(fanout, 0.5), pct(fanout, 0.99)))
            print(f"round {round_}: {args.runs} waiting, RSS {rss:.0f} MB (process at start {base:.0f} MB); "
                  f"decided -> future p50 {rows[-1][0]:.0f} ms, p99 {rows[-1][1]:.0f} ms, max {rows[-1][2]:.0f} ms; "
                  f"follower -> future p50 {rows[-1][4]:.1f} ms, p99 {rows[-1][5]:.1f} ms (setup {built:.0f}s)",
                  flush=True)
        rf.close()
    finally:
        decider.terminate()
        decider.wait(30)
        delete_topics(kafka, [s.name for s in specs])
    for name, i in (("decided -> future p50 ms", 0), ("decided -> future p99 ms", 1), ("RSS MB", 3),
                    ("follower -> future p50 ms", 4), ("follower -> future p99 ms", 5)):
        values = [r[i] for r in rows]
        print(f"{name}: median {statistics.median(values):.1f} (range {min(values):.1f}-{max(values):.1f}) "
              f"over {len(rows)} rounds of {args.runs} waiting runs")


if __name__ == "__main__":
    main()
