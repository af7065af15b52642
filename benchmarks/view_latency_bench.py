"""Latency from command to committed user view, at ~70% of the decider's SUSTAINED capacity.

Run: KAFKA_BOOTSTRAP_SERVERS=127.0.0.1:9092 .venv/bin/python benchmarks/view_latency_bench.py \
        [--runs 300] [--age 256] [--seconds 20] [--load 0.7] [--step-seconds 5] [--capacity N]

1. starts the run decider (`runfacts.processors.decider.app`, which hosts the user view) as its
   own worker process with the engine's defaults (or --commit-interval-ms / --poll-timeout-ms),
   on fresh topics, creates --runs runs and ages them (--age commands each, default a full
   dedupe window: from then on a run's state keeps its size, so the load stays the same from
   the ramp to the measurement);
2. measures the capacity the decider SUSTAINS with a fixed-rate ramp (a burst overstates it:
   a backlog is consumed in full batches, which a steady stream never fills): steps of
   --step-seconds at rates rising by --ramp-factor; a step keeps up when, once its last command
   is sent, all its views are visible within --max-lag-ms and its last quarter's views came no
   slower than its first quarter's (no backlog left, none building up). Capacity is the
   highest rate kept up, refined by one step between it and the first rate that was not;
3. sends UpdateProgress commands at --load x capacity for --seconds, round-robin over the
   runs; each carries a unique nextSafeAction, which the view shows, so a view is matched to
   its command (or to a later command of the same run: the decider publishes a run's view
   once per transaction, so that view is the first to show the earlier command's effect);
4. reports p50/p90/p99/max of (view visible to a read_committed consumer) - (command handed to
   the producer), the consumer in a process of its own (no GIL shared with the load generator)
   stamping each message when its consume call returned; the worker's CPU use (busy share of one
   core), and the latency's two parts: views appear in one burst per committed transaction, so
   each command's latency splits into the wait for its transaction to close and the commit +
   read of the burst.
The consumer uses fetch.wait.max.ms=10; the producer linger.ms=0. Topics are deleted and the
worker stopped at the end. --capacity skips the ramp (e.g. to repeat a measurement).
"""

from __future__ import annotations

import argparse
import math
import multiprocessing
import os
import re
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections import Counter
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from confluent_kafka import Consumer, Producer, TopicPartition

from runfacts.processors.decider.codec import DeciderCodec
from runfacts.processors.decider.context import DEFAULT_VERSIONS
from runfacts.processors.decider.state import DEDUPE_WINDOW
from runfacts.projections.user_view import schema
from runfacts.schemas import commands as cmd
from runfacts.schemas.codec import default_codec
from runfacts.schemas.common import Actor, BudgetAmounts
from runfacts.settings import KafkaSettings
from runfacts.topics import TopicNames, apply_topics, delete_topics, runfacts_topics

AGENT = Actor(subjectId="agent-harness", roles=("agent",), authSource="agent-harness")
ENCODE = DeciderCodec(default_codec()).encode


class Watcher(threading.Thread):
    """Records when each nextSafeAction token first shows in a committed view.

    The read_committed consumer runs in a process of its own (`_watch`), so the load generator
    in this process never holds the GIL it needs, and it stamps every message of a consume
    call with the moment that call returned: the time the view was visible to a reader, not
    that time plus the decoding of the messages before it in the same burst. This thread only
    merges the (run, token, time) batches it sends into `seen` and `runs`."""

    def __init__(self, kafka: KafkaSettings, topic: str) -> None:
        super().__init__(daemon=True)
        self.seen: dict[str, float] = {}
        self.runs: set[bytes] = set()
        self.stop_flag = False
        context = multiprocessing.get_context("spawn")
        self._conn, child = context.Pipe(duplex=False)
        self._stop = context.Event()
        self._ready = context.Event()
        self._process = context.Process(target=_watch, args=(kafka.client_config(), topic, child, self._stop,
                                                             self._ready), daemon=True)
        self._process.start()
        if not self._ready.wait(60):
            raise TimeoutError(f"the view watcher did not assign {topic} in 60 s")

    def run(self) -> None:
        while not self.stop_flag:
            if not self._conn.poll(0.05):
                continue
            for run, token, at in self._conn.recv():
                self.runs.add(run)
                self.seen.setdefault(token, at)
        self._stop.set()
        self._process.join(10)


def _watch(config: dict, topic: str, out, stop, ready) -> None:  # noqa: ANN001
    """The watcher's process: every committed view's (run, token, time consume returned it)."""
    consumer = Consumer({**config, "group.id": f"lat-{uuid.uuid4().hex[:8]}", "enable.auto.commit": False,
                         "isolation.level": "read_committed", "fetch.wait.max.ms": 10})
    parts = consumer.list_topics(topic, timeout=10).topics[topic].partitions
    consumer.assign([TopicPartition(topic, p, 0) for p in parts])
    decode = schema().decode
    ready.set()
    while not stop.is_set():
        messages = consumer.consume(500, 0.002)
        now = time.perf_counter()  # CLOCK_MONOTONIC: the same clock in every process
        found = [(m.key(), decode(m.value())["progress"]["nextSafeAction"], now) for m in messages
                 if m.error() is None and m.value() is not None]
        if found:
            out.send(found)
    consumer.close()


@dataclass
class Step:
    """One fixed-rate phase: what was offered and how the views followed."""

    rate: float
    sent: list[tuple[str, str, float]]  # (token, run, time handed to the producer)
    shown: dict[str, float]  # token -> when its effect was first visible
    lag_ms: float  # last view visible - last command sent (inf: not all views came)

    @property
    def latencies(self) -> list[float]:
        return sorted((self.shown[t] - at) * 1000 for t, _run, at in self.sent if t in self.shown)

    def kept_up(self, max_lag_ms: float) -> bool:
        """No backlog left at the end, and none building up: the last quarter of the step saw
        no slower views than the first quarter (+100 ms for noise)."""
        quarter = max(1, len(self.sent) // 4)
        first, last = (_median([(self.shown.get(t, math.inf) - at) * 1000 for t, _r, at in part])
                       for part in (self.sent[:quarter], self.sent[-quarter:]))
        return self.lag_ms <= max_lag_ms and last <= first + 100

    def pct(self, q: float) -> float:
        values = self.latencies
        return values[min(len(values) - 1, int(q * len(values)))] if values else math.inf


def _median(values: list[float]) -> float:
    return sorted(values)[len(values) // 2] if values else math.inf


def commits(step: Step, gap_ms: float = 10) -> tuple[list[float], list[float], list[float]]:
    """Views show up in bursts, one per committed transaction. Per command: the wait for its
    transaction to close (last command sent into the burst - this command sent) and the
    commit + read (burst visible - last command sent into it); and the gaps between bursts."""
    order = sorted((at, step.shown[t], t) for t, _r, at in step.sent if t in step.shown)
    bursts: dict[float, float] = {}  # burst start -> last command sent into it
    starts = sorted({shown for _at, shown, _t in order})
    first_of: dict[float, float] = {}
    start = -math.inf
    for shown in starts:
        if shown - start > gap_ms / 1000:
            start = shown
        first_of[shown] = start
    for at, shown, _t in order:
        bursts[first_of[shown]] = max(bursts.get(first_of[shown], 0.0), at)
    waits = sorted((bursts[first_of[shown]] - at) * 1000 for at, shown, _t in order)
    commit = sorted((shown - bursts[first_of[shown]]) * 1000 for _at, shown, _t in order)
    keys = sorted(bursts)
    gaps = sorted((b - a) * 1000 for a, b in zip(keys, keys[1:], strict=False))
    return waits, commit, gaps


def _command(cls, run: str, **payload):  # noqa: ANN001, ANN202
    payload_cls = cls.model_fields["payload"].annotation
    return cls(commandId=f"c-{uuid.uuid4().hex}", runId=run, actor=AGENT,
               issuedAt=datetime.now(UTC), correlationId=run, payload=payload_cls(**payload))


def _send(producer: Producer, topic: str, command) -> None:  # noqa: ANN001
    producer.produce(topic, ENCODE(command), command.runId.encode())
    producer.poll(0)


def _wait(condition, timeout: float) -> bool:  # noqa: ANN001
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.005)
    return True


def _create_runs(producer: Producer, names: TopicNames, runs: list[str], watcher: Watcher) -> None:
    for run in runs:
        _send(producer, names.commands, _command(
            cmd.CreateRun, run, goalRef="goal", goalSummary="latency bench", userId="bench",
            budget=BudgetAmounts(), versions=DEFAULT_VERSIONS))
    producer.flush(30)
    if not _wait(lambda: len(watcher.runs) >= len(runs), 120):
        raise TimeoutError("runs not created in 120 s")


def _age_runs(producer: Producer, names: TopicNames, runs: list[str], watcher: Watcher,
              commands: int) -> None:
    """`commands` UpdateProgress per run, as fast as they go: the runs' states reach the size they
    keep from then on (the dedupe window is full), so every later phase meets the same load."""
    last: dict[str, str] = {}
    for n in range(commands * len(runs)):
        run = runs[n % len(runs)]
        last[run] = f"age-{n}"
        _send(producer, names.commands, _command(cmd.UpdateProgress, run, nextSafeAction=last[run]))
    producer.flush(60)
    if not _wait(lambda: all(t in watcher.seen for t in last.values()), 600):
        raise TimeoutError("the runs were not aged in 600 s")
    _settle(watcher)


def _paced(producer: Producer, names: TopicNames, runs: list[str], rate: float,
           seconds: float, tag: str) -> list[tuple[str, str, float]]:
    """UpdateProgress commands at a fixed `rate` for `seconds`: (token, run, time handed over)."""
    sent: list[tuple[str, str, float]] = []
    start, n = time.perf_counter(), 0
    while n < rate * seconds:
        pause = start + n / rate - time.perf_counter()
        if pause > 0:
            time.sleep(pause)
        token, run = f"{tag}-{n}", runs[n % len(runs)]
        command = _command(cmd.UpdateProgress, run, nextSafeAction=token)
        sent.append((token, run, time.perf_counter()))
        _send(producer, names.commands, command)
        n += 1
    producer.flush(30)
    return sent


def visible(sent: list[tuple[str, str, float]], seen: dict[str, float]) -> dict[str, float]:
    """When each command's effect became visible: the first view of its run showing it or a
    later command of the run (a transaction publishes a run's last view only)."""
    out: dict[str, float] = {}
    earliest: dict[str, float] = {}
    for token, run, _at in reversed(sent):
        shown = min(seen.get(token, math.inf), earliest.get(run, math.inf))
        earliest[run] = shown
        if shown < math.inf:
            out[token] = shown
    return out


def step(producer: Producer, names: TopicNames, runs: list[str], watcher: Watcher,
         rate: float, seconds: float) -> Step:
    """Offer `rate` commands/s for `seconds`, then wait for their views (a bounded drain)."""
    tag = f"r{rate:.0f}-{uuid.uuid4().hex[:6]}"
    sent = _paced(producer, names, runs, rate, seconds, tag)
    last_of_run = {run: token for token, run, _at in sent}
    complete = _wait(lambda: all(t in watcher.seen for t in last_of_run.values()), 3 * seconds + 10)
    shown = visible(sent, dict(watcher.seen))
    lag = (max(shown.values()) - sent[-1][2]) * 1000 if complete else math.inf
    return Step(rate, sent, shown, lag)


def ramp(producer: Producer, names: TopicNames, runs: list[str], watcher: Watcher,
         args: argparse.Namespace) -> tuple[float, list[Step]]:
    """The highest rate the decider keeps up with (see module docstring, step 2)."""
    steps: list[Step] = []
    rate, good = args.ramp_start, 0.0
    while rate <= args.ramp_max:
        steps.append(step(producer, names, runs, watcher, rate, args.step_seconds))
        _show(steps[-1], args.max_lag_ms)
        if not steps[-1].kept_up(args.max_lag_ms):
            break
        good, rate = rate, rate * args.ramp_factor
    if good and rate <= args.ramp_max:
        _settle(watcher)
        middle = math.sqrt(good * rate)
        steps.append(step(producer, names, runs, watcher, middle, args.step_seconds))
        _show(steps[-1], args.max_lag_ms)
        if steps[-1].kept_up(args.max_lag_ms):
            good = middle
    return good, steps


def _settle(watcher: Watcher, quiet_s: float = 1.0) -> None:
    """Let a backlog left by an overloaded step drain before the next measurement."""
    count = -1
    while count != len(watcher.seen):
        count = len(watcher.seen)
        time.sleep(quiet_s)


def _show(s: Step, max_lag_ms: float) -> None:
    verdict = "kept up" if s.kept_up(max_lag_ms) else "fell behind"
    print(f"  {s.rate:8,.0f}/s x {len(s.sent) / s.rate:.0f}s: end lag {s.lag_ms:8.1f} ms, p50 "
          f"{s.pct(0.5):7.1f} ms, p99 {s.pct(0.99):8.1f} ms  -> {verdict}", flush=True)


def cpu_seconds(pid: int) -> float:
    """utime + stime of every thread of `pid`."""
    stat = Path(f"/proc/{pid}/stat").read_text()
    fields = stat[stat.rindex(")") + 2:].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def cpu_by_thread(pid: int) -> Counter[str]:
    """CPU seconds of `pid` by thread kind (its name up to a digit or ':' suffix: `rocksdb:low`
    -> `rocksdb`, `rdk:broker1` -> `rdk`, `python` ...): where a process's CPU goes, threads
    included (RocksDB's compactions, librdkafka's I/O)."""
    out: Counter[str] = Counter()
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            stat = (task / "stat").read_text()
        except FileNotFoundError:  # the thread ended
            continue
        name = stat[stat.index("(") + 1:stat.rindex(")")]
        fields = stat[stat.rindex(")") + 2:].split()
        kind = re.split(r"[:\d]", name, maxsplit=1)[0] or name
        out[kind] += (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    return out


def _start_worker(kafka: KafkaSettings, names: TopicNames, state_dir: str,
                  args: argparse.Namespace) -> subprocess.Popen[bytes]:
    env = {**os.environ, "RUNFACTS_KAFKA_BOOTSTRAP_SERVERS": kafka.bootstrap_servers,
           "RUNFACTS_STATE_DIR": state_dir, "RUNFACTS_INSTANCE_ID": f"{names.prefix}-1"}
    if args.commit_interval_ms:
        env["RUNFACTS_COMMIT_INTERVAL_MS"] = str(args.commit_interval_ms)
    if args.poll_timeout_ms is not None:
        env["RUNFACTS_POLL_TIMEOUT_MS"] = str(args.poll_timeout_ms)
    return subprocess.Popen([sys.executable, "-m", "runfacts.processors.engine.worker", "--app",
                             "runfacts.workers:decider",
                             "--param", f"prefix={names.prefix}"], env=env)


def measure(kafka: KafkaSettings, names: TopicNames, worker: subprocess.Popen[bytes],
            args: argparse.Namespace) -> None:
    watcher = Watcher(kafka, names.user_view)
    watcher.start()
    producer = Producer(kafka.producer_config(**{"linger.ms": 0, "enable.idempotence": True}))
    runs = [f"lat-run-{i}" for i in range(args.runs)]
    _create_runs(producer, names, runs, watcher)
    _age_runs(producer, names, runs, watcher, args.age)
    capacity = args.capacity
    if not capacity:
        print(f"ramp from {args.ramp_start:,.0f}/s, x{args.ramp_factor} per {args.step_seconds:.0f}s step, "
              f"kept up = end lag <= {args.max_lag_ms:.0f} ms:", flush=True)
        capacity, _ = ramp(producer, names, runs, watcher, args)
        if not capacity:
            raise SystemExit(f"the decider fell behind already at {args.ramp_start:,.0f}/s: lower --ramp-start")
        _settle(watcher)
    cpu0, wall0 = cpu_seconds(worker.pid), time.perf_counter()
    steady = step(producer, names, runs, watcher, capacity * args.load, args.seconds)
    busy = (cpu_seconds(worker.pid) - cpu0) / (time.perf_counter() - wall0)
    watcher.stop_flag = True
    _report(capacity, steady, busy, args)


def _report(capacity: float, steady: Step, busy: float, args: argparse.Namespace) -> None:
    print(f"sustained capacity {capacity:,.0f} commands/s ({args.runs} runs); steady load "
          f"{steady.rate:,.0f}/s ({args.load:.0%}) for {args.seconds:.0f}s, {len(steady.sent)} commands, "
          f"commit interval {args.commit_interval_ms or 'default'} ms, poll timeout "
          f"{'default' if args.poll_timeout_ms is None else args.poll_timeout_ms} ms; "
          f"worker CPU {busy:.0%} of a core")
    print(f"command -> committed user view: p50 {steady.pct(0.5):.1f} ms, p90 {steady.pct(0.9):.1f} ms, "
          f"p99 {steady.pct(0.99):.1f} ms, max {steady.pct(1.0):.1f} ms "
          f"(end lag {steady.lag_ms:.0f} ms)")
    waits, commit, gaps = commits(steady)
    print(f"  of which: waiting for the transaction to close p50 {_pq(waits, 0.5):.1f} / p99 "
          f"{_pq(waits, 0.99):.1f} ms; commit + read_committed fetch p50 {_pq(commit, 0.5):.1f} / p99 "
          f"{_pq(commit, 0.99):.1f} ms; {len(gaps) + 1} transactions, {_pq(gaps, 0.5):.0f} ms apart (p50)")


def _pq(values: list[float], q: float) -> float:
    return values[min(len(values) - 1, int(q * len(values)))] if values else math.nan


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=300)
    parser.add_argument("--age", type=int, default=DEDUPE_WINDOW,
                        help="commands per run before measuring (default: a full dedupe window)")
    parser.add_argument("--seconds", type=float, default=20)
    parser.add_argument("--load", type=float, default=0.7)
    parser.add_argument("--capacity", type=float, default=0, help="skip the ramp: commands/s")
    parser.add_argument("--ramp-start", type=float, default=250)
    parser.add_argument("--ramp-factor", type=float, default=1.5)
    parser.add_argument("--ramp-max", type=float, default=50_000)
    parser.add_argument("--step-seconds", type=float, default=5)
    parser.add_argument("--max-lag-ms", type=float, default=250)
    parser.add_argument("--commit-interval-ms", type=int, default=0, help="0: the engine default")
    parser.add_argument("--poll-timeout-ms", type=int, default=None, help="default: the engine's")
    args = parser.parse_args()
    kafka = KafkaSettings()
    names = TopicNames(f"lat{uuid.uuid4().hex[:8]}")
    apply_topics(kafka, runfacts_topics(names))
    with tempfile.TemporaryDirectory() as state_dir:
        worker = _start_worker(kafka, names, state_dir, args)
        try:
            measure(kafka, names, worker, args)
        finally:
            worker.terminate()
            worker.wait(30)
            delete_topics(kafka, [s.name for s in runfacts_topics(names)])


if __name__ == "__main__":
    main()
