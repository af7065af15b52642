"""Latency from command to committed user view, at a steady load of ~70% of capacity.

Run: KAFKA_BOOTSTRAP_SERVERS=127.0.0.1:9092 .venv/bin/python benchmarks/view_latency_bench.py \
        [--runs 60] [--burst 3000] [--seconds 20] [--load 0.7] [--commit-interval-ms 100]

1. starts the run decider (`runfacts.processors.decider_app`, which hosts the user view) as its
   own worker process, on fresh topics;
2. creates --runs runs, then measures capacity: --burst UpdateProgress commands sent at once,
   commands per second until the last one's view is visible to a read_committed consumer;
3. sends UpdateProgress commands at --load x capacity for --seconds; each carries a unique
   nextSafeAction, which the view shows, so a view is matched to its command;
4. reports p50/p90/p99/max of (view visible to the consumer) - (command handed to the
   producer). The consumer uses fetch.wait.max.ms=10; the producer linger.ms=0.
Topics it creates are deleted; the worker is stopped.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from datetime import UTC, datetime

from confluent_kafka import Consumer, Producer, TopicPartition

from runfacts.projections.user_view import schema
from runfacts.schemas import codec
from runfacts.schemas import commands as cmd
from runfacts.schemas.common import Actor, BudgetAmounts
from runfacts.settings import KafkaSettings
from runfacts.topics import TopicNames, apply_topics, delete_topics, runfacts_topics

AGENT = Actor(subjectId="agent-harness", roles=("agent",), authSource="agent-harness")


class Watcher(threading.Thread):
    """Records when each nextSafeAction token first shows in a committed view."""

    def __init__(self, kafka: KafkaSettings, topic: str) -> None:
        super().__init__(daemon=True)
        self.seen: dict[str, float] = {}
        self.runs: set[bytes] = set()
        self.stop_flag = False
        self.consumer = Consumer(kafka.client_config(**{
            "group.id": f"lat-{uuid.uuid4().hex[:8]}", "enable.auto.commit": False,
            "isolation.level": "read_committed", "fetch.wait.max.ms": 10}))
        parts = self.consumer.list_topics(topic, timeout=10).topics[topic].partitions
        self.consumer.assign([TopicPartition(topic, p, 0) for p in parts])
        self.decode = schema().decode

    def run(self) -> None:
        while not self.stop_flag:
            for message in self.consumer.consume(100, 0.002):
                if message.error() is not None or message.value() is None:
                    continue
                now = time.perf_counter()
                self.runs.add(message.key())
                token = self.decode(message.value())["progress"]["nextSafeAction"]
                self.seen.setdefault(token, now)
        self.consumer.close()


def _command(cls, run: str, **payload):  # noqa: ANN001, ANN202
    payload_cls = cls.model_fields["payload"].annotation
    return cls(commandId=f"c-{uuid.uuid4().hex}", runId=run, actor=AGENT,
               issuedAt=datetime.now(UTC), correlationId=run, payload=payload_cls(**payload))


def _create(run: str) -> cmd.CreateRun:
    from runfacts.processors.decider_app import DEFAULT_VERSIONS

    return _command(cmd.CreateRun, run, goalRef="goal", goalSummary="latency bench",
                    userId="bench", budget=BudgetAmounts(), versions=DEFAULT_VERSIONS)


def _send(producer: Producer, topic: str, command) -> None:  # noqa: ANN001
    producer.produce(topic, codec.encode(command), command.runId.encode())
    producer.poll(0)


def _wait(condition, timeout: float, what: str) -> None:  # noqa: ANN001
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what} not reached in {timeout}s")
        time.sleep(0.01)


def _progress(run: str, token: str) -> cmd.UpdateProgress:
    return _command(cmd.UpdateProgress, run, nextSafeAction=token)


def _capacity(producer: Producer, names: TopicNames, runs: list[str], watcher: Watcher,
              burst: int) -> float:
    tokens = [f"cap-{i}" for i in range(burst)]
    start = time.perf_counter()
    for i, token in enumerate(tokens):
        _send(producer, names.commands, _progress(runs[i % len(runs)], token))
    producer.flush(30)
    _wait(lambda: all(t in watcher.seen for t in tokens), 120, "capacity burst")
    return burst / (max(watcher.seen[t] for t in tokens) - start)


def _steady(producer: Producer, names: TopicNames, runs: list[str], watcher: Watcher,
            rate: float, seconds: float) -> list[float]:
    sent: dict[str, float] = {}
    start, n = time.perf_counter(), 0
    while time.perf_counter() - start < seconds:
        due = start + n / rate
        pause = due - time.perf_counter()
        if pause > 0:
            time.sleep(pause)
        token = f"steady-{n}"
        command = _progress(runs[n % len(runs)], token)
        sent[token] = time.perf_counter()
        _send(producer, names.commands, command)
        n += 1
    producer.flush(30)
    _wait(lambda: all(t in watcher.seen for t in sent), 60, "steady views")
    return sorted((watcher.seen[t] - sent[t]) * 1000 for t in sent)


def _pct(values: list[float], q: float) -> float:
    return values[min(len(values) - 1, int(q * len(values)))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=60)
    parser.add_argument("--burst", type=int, default=3000)
    parser.add_argument("--seconds", type=float, default=20)
    parser.add_argument("--load", type=float, default=0.7)
    parser.add_argument("--commit-interval-ms", type=int, default=100)
    parser.add_argument("--poll-timeout-ms", type=int, default=100,
                        help="the engine's consume timeout (RUNFACTS_POLL_TIMEOUT_MS)")
    args = parser.parse_args()
    kafka = KafkaSettings()
    names = TopicNames(f"lat{uuid.uuid4().hex[:8]}")
    apply_topics(kafka, runfacts_topics(names))
    with tempfile.TemporaryDirectory() as state_dir:
        worker = _start_worker(kafka, names, state_dir, args)
        try:
            _measure(kafka, names, args)
        finally:
            worker.terminate()
            worker.wait(30)
            delete_topics(kafka, [s.name for s in runfacts_topics(names)])


def _start_worker(kafka: KafkaSettings, names: TopicNames, state_dir: str,
                  args: argparse.Namespace) -> subprocess.Popen[bytes]:
    env = {**os.environ, "RUNFACTS_BOOTSTRAP_SERVERS": kafka.bootstrap_servers,
           "RUNFACTS_STATE_DIR": state_dir, "RUNFACTS_INSTANCE_ID": f"{names.prefix}-1",
           "RUNFACTS_COMMIT_INTERVAL_MS": str(args.commit_interval_ms),
           "RUNFACTS_POLL_TIMEOUT_MS": str(args.poll_timeout_ms)}
    return subprocess.Popen([sys.executable, "-m", "runfacts.processors.worker", "--app",
                             "runfacts.processors.decider_app:decider_app",
                             "--param", f"prefix={names.prefix}"], env=env)


def _measure(kafka: KafkaSettings, names: TopicNames, args: argparse.Namespace) -> None:
    watcher = Watcher(kafka, names.user_view)
    watcher.start()
    producer = Producer(kafka.client_config(**{"linger.ms": 0, "enable.idempotence": True}))
    runs = [f"lat-run-{i}" for i in range(args.runs)]
    for run in runs:
        _send(producer, names.commands, _create(run))
    producer.flush(30)
    _wait(lambda: len(watcher.runs) >= len(runs), 120, "runs created")
    capacity = _capacity(producer, names, runs, watcher, args.burst)
    rate = capacity * args.load
    latencies = _steady(producer, names, runs, watcher, rate, args.seconds)
    watcher.stop_flag = True
    print(f"capacity {capacity:,.0f} commands/s (burst of {args.burst}); steady load "
          f"{rate:,.0f}/s ({args.load:.0%}) for {args.seconds:.0f}s, "
          f"commit interval {args.commit_interval_ms} ms, engine poll timeout "
          f"{args.poll_timeout_ms} ms, {len(latencies)} commands")
    print(f"command -> committed user view: p50 {_pct(latencies, 0.5):.1f} ms, "
          f"p90 {_pct(latencies, 0.9):.1f} ms, p99 {_pct(latencies, 0.99):.1f} ms, "
          f"max {latencies[-1]:.1f} ms")


if __name__ == "__main__":
    main()
