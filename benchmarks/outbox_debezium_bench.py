"""Debezium on Kafka Connect vs the built-in relay, same PostgreSQL, same broker, same rows.

    python benchmarks/outbox_debezium_bench.py [--events 20000] [--rate 1000] [--seconds 5] [--rounds 3]

Per round and publisher (the relay as a subprocess, as in production; Debezium's connector on a
standalone Connect worker started by scripts/kafka-connect.sh, on a free REST port):
- throughput: a backlog of `--events` rows (1000 per transaction) waits in PostgreSQL (relay:
  not started yet; Debezium: connector paused, its slot keeping the WAL), then the publisher
  starts / resumes; events/s = rows / time until a read_committed consumer saw the last one;
- latency: the publisher runs; a writer commits `--rate` events/s (10 per transaction) for
  `--seconds` after a 2 s warm-up; latency = consumer-visible time - commit-returned time.
Prints each round, then median and range per publisher, and the load average before and after.
Needs scripts/postgres.sh (wal_level=logical) and scripts/kafka.sh; reuses outbox_bench's rows.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
import uuid
from collections.abc import Callable
from multiprocessing import Pipe
from pathlib import Path

import psycopg
from outbox_bench import consume_into, drop, percentile, setup, start_relay, wait_for, write_at_rate

from runfacts.connectors.outbox.debezium import DebeziumOutbox
from runfacts.dev.services import LocalKafka, LocalPostgres

REPO = Path(__file__).resolve().parents[1]
CACHE = Path(os.environ.get("RUNFACTS_HOME", REPO / ".runfacts")) / "kafka-connect"


class Worker:
    """A standalone Connect worker of scripts/kafka-connect.sh with its own state directory."""

    def __init__(self, bootstrap: str) -> None:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        self.home = tempfile.mkdtemp(prefix="runfacts-connect-bench-")
        self.env = {**os.environ, "RUNFACTS_HOME": self.home, "KAFKA_CONNECT_PORT": str(self.port),
                    "KAFKA_BOOTSTRAP": bootstrap, "KAFKA_CONNECT_LIBS": str(CACHE / "libs"),
                    "KAFKA_CONNECT_PLUGINS": str(CACHE / "plugins")}

    def script(self, command: str) -> None:
        subprocess.run([str(REPO / "scripts" / "kafka-connect.sh"), command], env=self.env, check=True,
                       timeout=400)

    def call(self, method: str, path: str, body: object = None) -> object:
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(f"http://127.0.0.1:{self.port}{path}", data=data, method=method,
                                         headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=30) as response:
            text = response.read()
            return json.loads(text) if text else None

    def apply(self, connector: DebeziumOutbox) -> None:
        self.call("PUT", f"/connectors/{connector.connector_name}/config", connector.config())
        self.wait_state(connector, "RUNNING")

    def wait_state(self, connector: DebeziumOutbox, state: str, timeout: float = 120) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            status = self.call("GET", f"/connectors/{connector.connector_name}/status")
            tasks = status.get("tasks", []) if isinstance(status, dict) else []
            if tasks and all(t["state"] == state for t in tasks):
                return
            if any(t["state"] == "FAILED" for t in tasks):
                raise SystemExit(f"connector failed: {tasks[0].get('trace', '')[:1500]}")
            time.sleep(0.2)
        raise SystemExit(f"connector not {state} after {timeout}s")

    def remove(self, dsn: str, connector: DebeziumOutbox) -> None:
        self.call("DELETE", f"/connectors/{connector.connector_name}")
        with psycopg.connect(dsn, autocommit=True) as conn:
            for _ in range(200):
                row = conn.execute("SELECT active FROM pg_replication_slots WHERE slot_name = %s",
                                   (connector.slot,)).fetchone()
                if row is None:
                    break
                if not row[0]:
                    conn.execute("SELECT pg_drop_replication_slot(%s)", (connector.slot,))
                    break
                time.sleep(0.2)
            conn.execute(f"DROP PUBLICATION IF EXISTS {connector.slot}_pub")


def reader_for(bootstrap: str, topic: str):
    ours, theirs = Pipe()
    stop = multiprocessing.Event()
    process = multiprocessing.Process(target=consume_into, args=(bootstrap, topic, theirs, stop))
    process.start()
    return ours, stop, process


def collect(ours, stop, process) -> dict[str, float]:
    stop.set()
    seen = ours.recv()
    while not isinstance(seen, dict):
        seen = ours.recv()
    process.join()
    return seen


def fill(dsn: str, box, events: int) -> None:
    with psycopg.connect(dsn) as conn:
        for start in range(0, events, 1000):
            with box.transaction(conn) as tx:
                for i in range(start, min(events, start + 1000)):
                    tx.emit((f"e{i}", f"run-{i % 100}"))


class Relayed:
    """The built-in relay: started for the measurement, stopped after."""

    name = "relay"

    def __init__(self, dsn: str, bootstrap: str) -> None:
        self.dsn, self.bootstrap, self.process = dsn, bootstrap, None

    def prepare(self, box) -> None:
        pass

    def go(self, box, backlog: bool) -> None:
        self.process = start_relay(self.dsn, self.bootstrap, box.table, exit_when_idle=False)

    def finish(self, box) -> None:
        self.process.terminate()
        self.process.wait(30)


class Captured:
    """Debezium: the connector exists before the rows (its slot holds the WAL), paused for a backlog."""

    name = "debezium"

    def __init__(self, dsn: str, worker: Worker) -> None:
        self.dsn, self.worker, self.connector = dsn, worker, None

    def prepare(self, box) -> None:
        self.connector = DebeziumOutbox(self.dsn, "bench", table=box.table, snapshot="no_data",
                                        name=f"bench-{box.table}")
        self.worker.apply(self.connector)

    def pause(self) -> None:
        self.worker.call("PUT", f"/connectors/{self.connector.connector_name}/pause")
        self.worker.wait_state(self.connector, "PAUSED")

    def go(self, box, backlog: bool) -> None:
        if backlog:
            self.worker.call("PUT", f"/connectors/{self.connector.connector_name}/resume")

    def finish(self, box) -> None:
        self.worker.remove(self.dsn, self.connector)


def throughput(dsn: str, bootstrap: str, publisher, events: int) -> float:
    box, topic = setup(dsn, bootstrap, uuid.uuid4().hex[:8])
    publisher.prepare(box)
    if isinstance(publisher, Captured):
        publisher.pause()
    fill(dsn, box, events)
    ours, stop, process = reader_for(bootstrap, topic)
    began = time.monotonic()
    publisher.go(box, backlog=True)
    wait_for(ours, events, 600)
    elapsed = time.monotonic() - began
    seen = collect(ours, stop, process)
    publisher.finish(box)
    drop(dsn, box.table)
    if len(seen) < events:
        raise SystemExit(f"{publisher.name}: {events - len(seen)} events never arrived")
    return events / elapsed


def latency(dsn: str, bootstrap: str, publisher, rate: int, seconds: float) -> list[float]:
    box, topic = setup(dsn, bootstrap, uuid.uuid4().hex[:8])
    publisher.prepare(box)
    ours, stop, process = reader_for(bootstrap, topic)
    publisher.go(box, backlog=False)
    warm = write_at_rate(dsn, box, 200, 2.0)
    wait_for(ours, len(warm), 60)
    committed = write_at_rate(dsn, box, rate, seconds, prefix="m")
    wait_for(ours, len(warm) + len(committed), 60)
    seen = collect(ours, stop, process)
    publisher.finish(box)
    drop(dsn, box.table)
    missing = set(committed) - set(seen)
    if missing:
        raise SystemExit(f"{publisher.name}: {len(missing)} events never arrived")
    return sorted(seen[e] - committed[e] for e in committed)


def summary(values: list[float], unit: str, fmt: Callable[[float], str]) -> str:
    return f"median {fmt(statistics.median(values))}{unit} (range {fmt(min(values))}-{fmt(max(values))})"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--events", type=int, default=20000)
    parser.add_argument("--rate", type=int, default=1000)
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    dsn = os.environ.get("RUNFACTS_PG_DSN") or LocalPostgres().start()
    bootstrap = os.environ.get("KAFKA_BOOTSTRAP_SERVERS") or LocalKafka().start()
    load_before = os.getloadavg()
    worker = Worker(bootstrap)
    worker.script("start")
    results: dict[str, dict[str, list[float]]] = {}
    try:
        publishers = [Relayed(dsn, bootstrap), Captured(dsn, worker)]
        for n in range(args.rounds):
            for publisher in publishers:
                rate = throughput(dsn, bootstrap, publisher, args.events)
                lat = latency(dsn, bootstrap, publisher, args.rate, args.seconds)
                p50, p99 = percentile(lat, 0.50) * 1000, percentile(lat, 0.99) * 1000
                row = results.setdefault(publisher.name, {"rate": [], "p50": [], "p99": []})
                row["rate"].append(rate)
                row["p50"].append(p50)
                row["p99"].append(p99)
                print(f"round {n + 1} {publisher.name:8}: {rate:,.0f} events/s ({args.events} backlog); "
                      f"{len(lat)} events at {args.rate}/s: p50 {p50:.1f} ms, p99 {p99:.1f} ms", flush=True)
    finally:
        worker.script("stop")
    for name, row in results.items():
        print(f"{name:8}: {summary(row['rate'], ' events/s', lambda v: f'{v:,.0f}')}; "
              f"p50 {summary(row['p50'], ' ms', lambda v: f'{v:.0f}')}; "
              f"p99 {summary(row['p99'], ' ms', lambda v: f'{v:.0f}')}")
    print(f"load average (1/5/15 min) before {load_before[0]:.1f}/{load_before[1]:.1f}/{load_before[2]:.1f}, "
          f"after {os.getloadavg()[0]:.1f}/{os.getloadavg()[1]:.1f}/{os.getloadavg()[2]:.1f} on {os.cpu_count()} cores")


if __name__ == "__main__":
    sys.exit(main())
