"""The run decider's cost curves (docs/decider.md "Speed"): against load, against run age, and its memory
against the number of runs in state. Each mode drives the real decider worker (the process
`runfacts worker decider` runs, user view included) on fresh topics of the real broker, writes a
CSV to .runfacts/bench-results/ and a PNG to docs/figures/.

Run: KAFKA_BOOTSTRAP_SERVERS=127.0.0.1:9092 .venv/bin/python benchmarks/decider_curves.py MODE ...

  load  [--loads 0.1,0.3,0.5,0.7,0.9] [--runs 300] [--age 256] [--seconds 15] [--capacity N]
        [--ramp-start 250] [--rounds 1] [--commit-interval-ms N]
        the sustained capacity (view_latency_bench's ramp, or --capacity), then a steady stream
        at each share of it: command -> committed user view p50/p99, and the worker's CPU-µs
        per command (a fixed per-transaction cost shows as a line falling with load).
  age   [--ages 0,64,256,1024,4096] [--runs 30] [--rate 200] [--seconds 15] [--rounds 1]
        for each age a fresh worker whose runs have had that many commands each, then a steady
        stream at --rate (well below capacity at every age): CPU-µs per command and latency.
        The state compaction keeps a run's state size flat past the dedupe window; this shows
        whether its cost is flat too.
  rss   [--counts 100000,300000,1000000] [--batch 20000]
        CreateRun commands until each count of runs is in the decider's state; at each, once
        the worker has consumed them all: its RSS (VmRSS) and the state directory's bytes per run.

Latency is measured as in view_latency_bench.py (a unique nextSafeAction per command, matched to
the first committed view showing it). CPU is utime + stime of all the worker's threads. The
broker shares the machine's cores: compare rows of one run, not runs of different days.
"""

from __future__ import annotations

import argparse
import csv
import os
import statistics
import subprocess
import tempfile
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, replace
from datetime import UTC, datetime
from pathlib import Path

from confluent_kafka import Consumer, Producer, TopicPartition
from view_latency_bench import (
    ENCODE,
    Watcher,
    _age_runs,
    _command,
    _create_runs,
    _pq,
    _settle,
    _start_worker,
    commits,
    cpu_by_thread,
    cpu_seconds,
    ramp,
    step,
)

from runfacts.processors.decider.context import DEFAULT_VERSIONS
from runfacts.schemas import commands as cmd
from runfacts.schemas.common import BudgetAmounts
from runfacts.settings import KafkaSettings
from runfacts.topics import TopicNames, apply_topics, delete_topics, runfacts_topics

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / ".runfacts" / "bench-results"
FIGURES = REPO / "docs" / "figures"


@dataclass
class Point:
    """One steady phase: what was offered and what it cost."""

    x: float  # the load share, the run age or the run count
    rate: float
    commands: int
    cpu_us_per_command: float
    busy: float  # share of one core
    p50_ms: float
    p99_ms: float
    wait_p99_ms: float  # waiting for the transaction to close
    commit_p99_ms: float  # commit + read_committed fetch
    rss_mb: float = 0.0
    disk_bytes_per_run: float = 0.0
    anon_mb: float = 0.0  # rss mode: anonymous memory (heaps) of the RSS
    file_mb: float = 0.0  # rss mode: file-backed (mapped code and libraries)
    round: int = 0


@dataclass
class Bench:
    """A worker on fresh topics, its view watcher and a producer."""

    kafka: KafkaSettings
    names: TopicNames
    worker: subprocess.Popen[bytes]
    state_dir: Path
    watcher: Watcher | None
    producer: Producer


@contextmanager
def bench(kafka: KafkaSettings, watch: bool = True, commit_interval_ms: int = 0) -> Iterator[Bench]:
    names = TopicNames(f"crv{uuid.uuid4().hex[:8]}")
    apply_topics(kafka, runfacts_topics(names))
    options = argparse.Namespace(commit_interval_ms=commit_interval_ms, poll_timeout_ms=None)
    with tempfile.TemporaryDirectory() as state_dir:
        worker = _start_worker(kafka, names, state_dir, options)
        watcher = Watcher(kafka, names.user_view) if watch else None
        if watcher is not None:
            watcher.start()
        producer = Producer(kafka.producer_config(**{"linger.ms": 0, "enable.idempotence": True}))
        try:
            yield Bench(kafka, names, worker, Path(state_dir), watcher, producer)
        finally:
            if watcher is not None:
                watcher.stop_flag = True
            worker.terminate()
            worker.wait(30)
            delete_topics(kafka, own_topics(kafka, names.prefix))


def own_topics(kafka: KafkaSettings, prefix: str) -> list[str]:
    """Every topic of this bench: the runfacts topics and the engine's changelogs under `prefix`."""
    probe = Producer(kafka.producer_config())
    return [t for t in probe.list_topics(timeout=10).topics if t.startswith(prefix)]


def steady(b: Bench, runs: list[str], rate: float, seconds: float, x: float) -> Point:
    """A fixed-rate stream of UpdateProgress over `runs`; its latency and the worker's CPU."""
    assert b.watcher is not None
    _settle(b.watcher)
    cpu0, threads0 = cpu_seconds(b.worker.pid), cpu_by_thread(b.worker.pid)
    wall0 = time.perf_counter()
    s = step(b.producer, b.names, runs, b.watcher, rate, seconds)
    _settle(b.watcher, 0.5)  # the drain's CPU belongs to these commands too
    cpu = cpu_seconds(b.worker.pid) - cpu0
    threads = cpu_by_thread(b.worker.pid)
    threads.subtract(threads0)
    waits, commit, _gaps = commits(s)
    point = Point(x=x, rate=rate, commands=len(s.sent), cpu_us_per_command=cpu / len(s.sent) * 1e6,
                  busy=cpu / (time.perf_counter() - wall0), p50_ms=s.pct(0.5), p99_ms=s.pct(0.99),
                  wait_p99_ms=_pq(waits, 0.99), commit_p99_ms=_pq(commit, 0.99))
    print(f"  x={x:g}: {rate:,.0f}/s x {seconds:.0f}s, {point.cpu_us_per_command:,.0f} CPU-µs/command "
          f"({point.busy:.0%} of a core), view p50 {point.p50_ms:.1f} / p99 {point.p99_ms:.1f} ms "
          f"(transaction wait p99 {point.wait_p99_ms:.1f}, commit+fetch p99 {point.commit_p99_ms:.1f})",
          flush=True)
    by_thread = ", ".join(f"{name} {spent / len(s.sent) * 1e6:,.0f}"
                          for name, spent in threads.most_common() if spent > 0)
    print(f"    CPU-µs/command by thread: {by_thread}", flush=True)
    return point


def load_curve(kafka: KafkaSettings, args: argparse.Namespace) -> list[Point]:
    points = []
    with bench(kafka, commit_interval_ms=args.commit_interval_ms) as b:
        assert b.watcher is not None
        runs = [f"crv-run-{i}" for i in range(args.runs)]
        _create_runs(b.producer, b.names, runs, b.watcher)
        _age_runs(b.producer, b.names, runs, b.watcher, args.age)
        capacity = args.capacity
        if not capacity:
            ramp_args = argparse.Namespace(ramp_start=args.ramp_start, ramp_factor=1.5, ramp_max=50_000,
                                           step_seconds=5, max_lag_ms=250)
            capacity, _ = ramp(b.producer, b.names, runs, b.watcher, ramp_args)
            if not capacity:
                raise SystemExit(f"the decider fell behind already at {args.ramp_start:,.0f} commands/s: "
                                 "lower --ramp-start (or give --capacity)")
        print(f"sustained capacity {capacity:,.0f} commands/s ({args.runs} runs aged {args.age})", flush=True)
        for share in args.loads:
            points.append(steady(b, runs, capacity * share, args.seconds, share))
    return points


def age_curve(kafka: KafkaSettings, args: argparse.Namespace) -> list[Point]:
    points = []
    for age in args.ages:
        with bench(kafka, commit_interval_ms=args.commit_interval_ms) as b:
            assert b.watcher is not None
            runs = [f"crv-run-{i}" for i in range(args.runs)]
            _create_runs(b.producer, b.names, runs, b.watcher)
            _age_runs(b.producer, b.names, runs, b.watcher, age)
            points.append(steady(b, runs, args.rate, args.seconds, age))
    return points


def _consumed(kafka: KafkaSettings, group: str, topic: str) -> tuple[int, int]:
    """(records the group committed, records on the topic) over all partitions."""
    probe = Consumer(kafka.client_config(**{"group.id": group, "enable.auto.commit": False}))
    try:
        parts = [TopicPartition(topic, p) for p in probe.list_topics(topic, timeout=10).topics[topic].partitions]
        done = sum(max(tp.offset, 0) for tp in probe.committed(parts, timeout=10))
        end = sum(probe.get_watermark_offsets(tp, timeout=10)[1] for tp in parts)
        return done, end
    finally:
        probe.close()


def _rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError(f"no VmRSS for pid {pid}")


def _smaps_mb(pid: int) -> dict[str, float]:
    """Where the RSS is (smaps_rollup): anonymous (heaps: Python objects, RocksDB, librdkafka's
    queues) vs file-backed (the mapped interpreter, extension modules and shared libraries)."""
    fields = {}
    for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines()[1:]:
        name, _, rest = line.partition(":")
        if rest.strip().endswith("kB"):
            fields[name] = int(rest.split()[0]) / 1024
    return {"anon_mb": fields.get("Anonymous", 0.0), "file_mb": fields.get("Rss", 0.0) - fields.get("Anonymous", 0.0)}


def _disk_bytes(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


def rss_curve(kafka: KafkaSettings, args: argparse.Namespace) -> list[Point]:
    points = []
    with bench(kafka, watch=False) as b:
        group = f"{b.names.prefix}-run-decider"
        created = 0
        time.sleep(args.idle_seconds)  # started, joined, idle: the imports and the bounds' floor
        points.append(_rss_point(b, 0, 0, 0, 0))
        print(f"  idle, no runs: RSS {points[0].rss_mb:,.0f} MB (anonymous {points[0].anon_mb:,.0f}, "
              f"file-backed {points[0].file_mb:,.0f})", flush=True)
        for count in args.counts:
            t0, cpu0 = time.perf_counter(), cpu_seconds(b.worker.pid)
            while created < count:
                for i in range(created, min(count, created + args.batch)):
                    command = _command(cmd.CreateRun, f"rss-run-{i}", goalRef="goal", goalSummary="rss bench",
                                       userId="bench", budget=BudgetAmounts(), versions=DEFAULT_VERSIONS)
                    while True:
                        try:
                            b.producer.produce(b.names.commands, ENCODE(command), command.runId.encode())
                            break
                        except BufferError:
                            b.producer.poll(0.05)
                    b.producer.poll(0)
                created = min(count, created + args.batch)
                b.producer.flush(120)
            while (done := _consumed(kafka, group, b.names.commands))[0] < done[1]:
                if b.worker.poll() is not None:  # the points so far are still written (CSV and PNG)
                    print(f"the decider exited ({b.worker.returncode}) at {done[0]:,} commands", flush=True)
                    return points
                time.sleep(1)
            time.sleep(2)  # the last commit's store writes
            cpu = cpu_seconds(b.worker.pid) - cpu0
            added = count - points[-1].x
            point = _rss_point(b, count, added, added / (time.perf_counter() - t0), cpu / added * 1e6)
            print(f"  {count:,} runs: RSS {point.rss_mb:,.0f} MB (anonymous {point.anon_mb:,.0f}, file-backed "
                  f"{point.file_mb:,.0f}), state dir {point.disk_bytes_per_run:,.0f} bytes/run, CreateRun "
                  f"{point.cpu_us_per_command:,.0f} CPU-µs each ({point.rate:,.0f}/s)", flush=True)
            points.append(point)
    return points


def _rss_point(b: Bench, count: int, added: float, rate: float, cpu_us: float) -> Point:
    return Point(x=count, rate=rate, commands=int(added), cpu_us_per_command=cpu_us, busy=0, p50_ms=0, p99_ms=0,
                 wait_p99_ms=0, commit_p99_ms=0, rss_mb=_rss_mb(b.worker.pid),
                 disk_bytes_per_run=_disk_bytes(b.state_dir) / count if count else 0.0,
                 **_smaps_mb(b.worker.pid))


def write(mode: str, points: list[Point], args: argparse.Namespace) -> tuple[Path, Path]:
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    results, figures = (args.out, args.out) if args.out else (RESULTS, FIGURES)
    results.mkdir(parents=True, exist_ok=True)
    table = results / f"decider-{mode}-{stamp}.csv"
    with table.open("w", newline="") as out:
        writer = csv.DictWriter(out, fieldnames=list(asdict(points[0])))
        writer.writeheader()
        writer.writerows(asdict(p) for p in points)
    interval = getattr(args, "commit_interval_ms", 0)
    figure = figures / f"decider-{mode}{f'-{interval}ms' if interval else ''}.png"
    plot(mode, points, figure, f"{stamp}, load {os.getloadavg()[0]:.1f}, {args_line(args)}")
    return table, figure


def args_line(args: argparse.Namespace) -> str:
    return " ".join(f"{k}={v}" for k, v in vars(args).items() if k not in ("mode", "out") and not isinstance(v, list))


def plot(mode: str, points: list[Point], path: Path, caption: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    xs = sorted({p.x for p in points})
    med = {x: summary([p for p in points if p.x == x]) for x in xs}
    fig, left = plt.subplots(figsize=(7, 4), dpi=110)
    if mode == "rss":
        left.plot(xs, [p.rss_mb for p in points], "o-", label="worker RSS (MB)")
        left.plot(xs, [p.anon_mb for p in points], ".:", label="of it anonymous (heaps)")
        left.axhline(300, color="grey", linestyle=":", label="bar: 300 MB at 1M runs")
        left.set_xlabel("runs in the decider's state")
        left.set_ylabel("MB")
        right = left.twinx()
        right.plot([x for x in xs if x], [p.disk_bytes_per_run for p in points if p.x], "s--", color="tab:green",
                   label="disk bytes/run")
        right.set_ylabel("state dir bytes per run")
    else:
        rounds = len({p.round for p in points})
        for field, label in (("p50_ms", "view p50 (ms)"), ("p99_ms", "view p99 (ms)")):
            mids = [med[x][field][0] for x in xs]
            spread = [[m - med[x][field][1] for m, x in zip(mids, xs, strict=True)],
                      [med[x][field][2] - m for m, x in zip(mids, xs, strict=True)]]
            left.errorbar(xs, mids, yerr=spread, fmt="o-", capsize=3, label=label)
        if mode == "load":
            left.axhline(150, color="grey", linestyle=":", label="bar: p99 150 ms at 70%")
        left.set_ylabel(f"view latency, ms (median, range of {rounds})")
        left.set_xlabel("share of sustained capacity" if mode == "load" else "commands the run had before")
        if mode == "age":
            left.set_xscale("symlog", linthresh=64)
        right = left.twinx()
        mids = [med[x]["cpu_us_per_command"][0] for x in xs]
        spread = [[m - med[x]["cpu_us_per_command"][1] for m, x in zip(mids, xs, strict=True)],
                  [med[x]["cpu_us_per_command"][2] - m for m, x in zip(mids, xs, strict=True)]]
        right.errorbar(xs, mids, yerr=spread, fmt="s--", capsize=3, color="tab:red", label="CPU-µs/command")
        right.set_ylabel("worker CPU-µs per command")
        right.set_ylim(bottom=0)
    left.set_ylim(bottom=0)
    handles = left.get_legend_handles_labels()[0] + right.get_legend_handles_labels()[0]
    labels = left.get_legend_handles_labels()[1] + right.get_legend_handles_labels()[1]
    left.legend(handles, labels, loc="upper left", fontsize=8)
    left.set_title(f"run decider + user view: {mode}", fontsize=10)
    fig.text(0.01, 0.01, caption, fontsize=6, color="grey")
    fig.tight_layout(rect=(0, 0.03, 1, 1))
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)
    plt.close(fig)


FIELDS = ("rate", "cpu_us_per_command", "p50_ms", "p99_ms", "wait_p99_ms", "commit_p99_ms")


def summary(points: list[Point]) -> dict[str, tuple[float, float, float]]:
    """(median, min, max) of each measured field over the rounds of one x."""
    return {f: (statistics.median(v), min(v), max(v)) for f in FIELDS
            for v in [[getattr(p, f) for p in points]]}


def print_table(points: list[Point]) -> None:
    """Per x: median (range) over the rounds, as the docs' tables give them."""
    rounds = len({p.round for p in points})
    print(f"median (range) of {rounds} round(s):")
    print("| x | rate/s | CPU-µs/command | view p50 ms | view p99 ms | txn wait p99 ms | commit+fetch p99 ms |")
    for x in sorted({p.x for p in points}):
        m = summary([p for p in points if p.x == x])
        cells = [f"{a:,.0f} ({b:,.0f}-{c:,.0f})" for a, b, c in (m[f] for f in FIELDS)]
        print(f"| {x:g} | " + " | ".join(cells) + " |")


def _numbers(kind: type) -> object:
    return lambda text: [kind(v) for v in text.split(",") if v]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    modes = parser.add_subparsers(dest="mode", required=True)
    load = modes.add_parser("load", help="latency and CPU against the share of sustained capacity")
    load.add_argument("--loads", type=_numbers(float), default=[0.1, 0.3, 0.5, 0.7, 0.9])
    load.add_argument("--runs", type=int, default=300)
    load.add_argument("--age", type=int, default=256)
    load.add_argument("--seconds", type=float, default=15)
    load.add_argument("--capacity", type=float, default=0, help="skip the ramp: commands/s")
    load.add_argument("--ramp-start", type=float, default=250, help="the ramp's first rate, commands/s")
    age = modes.add_parser("age", help="CPU and latency against the commands a run had before")
    age.add_argument("--ages", type=_numbers(int), default=[0, 64, 256, 1024, 4096])
    age.add_argument("--runs", type=int, default=30)
    age.add_argument("--rate", type=float, default=200)
    age.add_argument("--seconds", type=float, default=15)
    rss = modes.add_parser("rss", help="worker RSS and disk against the runs in state")
    rss.add_argument("--counts", type=_numbers(int), default=[100_000, 300_000, 1_000_000])
    rss.add_argument("--batch", type=int, default=20_000)
    rss.add_argument("--idle-seconds", type=float, default=15, help="before the first run: the idle worker's RSS")
    for mode in (load, age):
        mode.add_argument("--rounds", type=int, default=1, help="repeat the curve: median and range per point")
        mode.add_argument("--commit-interval-ms", type=int, default=0, help="0: the engine's default")
    for mode in (load, age, rss):
        mode.add_argument("--out", type=Path, default=None,
                          help="write the CSV and PNG here (default: .runfacts/bench-results, docs/figures)")
    args = parser.parse_args(argv)
    kafka = KafkaSettings()
    print(f"decider_curves {args.mode}: {args_line(args)}; load average {os.getloadavg()[0]:.1f}", flush=True)
    curve = {"load": load_curve, "age": age_curve, "rss": rss_curve}[args.mode]
    points = []
    for round_no in range(1, getattr(args, "rounds", 1) + 1):
        print(f"round {round_no}: load average {os.getloadavg()[0]:.1f}", flush=True)
        points += [replace(p, round=round_no) for p in curve(kafka, args)]
    if args.mode != "rss":
        print_table(points)
    table, figure = write(args.mode, points, args)
    print(f"results: {table}\nfigure: {figure}")


if __name__ == "__main__":
    main()
