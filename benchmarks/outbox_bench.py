"""Outbox relay benchmark on PostgreSQL + Kafka: throughput and commit -> published latency.

    python benchmarks/outbox_bench.py [--events 50000] [--seconds 10] [--rate 2000]

Phase 1 (throughput): pre-fill `--events` outbox rows, start the relay (a subprocess, as in
production), time until every row is published and marked. Prints events/s.
Phase 2 (latency): the relay runs; a writer commits `--rate` events/s (10 per transaction)
for `--seconds`; a read_committed consumer (own process) notes when each event is visible.
A 2 s warm-up at 200 events/s comes first (producer metadata, partitions: a relay is long-lived).
Latency = consumer-visible time - commit-returned time, so it bounds commit -> published
from above. Prints p50/p99/max. Bars (README "Measured"): >= 10k events/s, p99 <= 200 ms.
Needs scripts/postgres.sh and scripts/kafka.sh (started if not running).
"""

from __future__ import annotations

import argparse
import io
import multiprocessing
import os
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass
from multiprocessing import Pipe
from multiprocessing.connection import Connection
from multiprocessing.synchronize import Event

import fastavro
import psycopg
from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from runfacts.connectors.outbox.store import OutboxStore
from runfacts.connectors.outbox.writer import EncodedRecord, Outbox
from runfacts.dev.services import LocalKafka, LocalPostgres

PARTITIONS = 6
SCHEMA = fastavro.parse_schema({
    "type": "record", "name": "BenchHappened", "namespace": "runfacts.bench",
    "fields": [{"name": "eventId", "type": "string"}, {"name": "runId", "type": "string"},
               {"name": "payload", "type": "string"}]})


@dataclass(frozen=True)
class BenchEncoder:
    """Encodes (event_id, run_id) tuples with fastavro: a stand-in for the real codec."""

    topic: str

    def encode(self, event: tuple[str, str]) -> EncodedRecord:
        event_id, run_id = event
        out = io.BytesIO()
        fastavro.schemaless_writer(out, SCHEMA, {"eventId": event_id, "runId": run_id,
                                                 "payload": "x" * 200})
        return EncodedRecord(self.topic, run_id, out.getvalue(), event_id)


def relay_command(dsn: str, bootstrap: str, table: str, *, exit_when_idle: bool) -> list[str]:
    """`runfacts outbox relay ...` as a subprocess runs it (the CLI's module is runfacts.cli)."""
    command = [sys.executable, "-m", "runfacts.cli", "outbox", "relay", "--db", dsn,
               "--bootstrap", bootstrap, "--table", table, "--batch-size", "5000"]
    if exit_when_idle:
        command.append("--exit-when-idle")
    return command


def start_relay(dsn: str, bootstrap: str, table: str, *, exit_when_idle: bool):
    return subprocess.Popen(relay_command(dsn, bootstrap, table, exit_when_idle=exit_when_idle),
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def setup(dsn: str, bootstrap: str, tag: str) -> tuple[Outbox, str]:
    topic, table = f"bench.outbox.{tag}", f"ob_bench_{tag}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.create_topics([NewTopic(topic, PARTITIONS, 1)]).values():
        future.result(30)
    box = Outbox(BenchEncoder(topic), table=table)
    with psycopg.connect(dsn) as conn:
        box.install(conn)
    return box, topic


def throughput(dsn: str, bootstrap: str, events: int) -> float:
    box, _ = setup(dsn, bootstrap, uuid.uuid4().hex[:8])
    with psycopg.connect(dsn) as conn:
        for start in range(0, events, 1000):
            with box.transaction(conn) as tx:
                for i in range(start, min(events, start + 1000)):
                    tx.emit((f"e{i}", f"run-{i % 100}"))
    began = time.monotonic()
    relay = start_relay(dsn, bootstrap, box.table, exit_when_idle=True)
    if relay.wait(600) != 0:
        raise SystemExit(f"relay exited with {relay.returncode}")
    elapsed = time.monotonic() - began
    store = OutboxStore.open(dsn, box.table)
    pending = store.metrics().pending
    store.close()
    if pending:
        raise SystemExit(f"{pending} rows still pending after the relay exited")
    drop(dsn, box.table)
    return events / elapsed


def drop(dsn: str, table: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(f"DROP TABLE IF EXISTS {table}, {table}_parked, {table}_lease, "
                     f"{table}_archive")


def consume_into(bootstrap: str, topic: str, out: Connection, stop: Event) -> None:
    """Child process: note when each eventId becomes visible; send the dict when stopped."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"bench-{topic}",
                         "auto.offset.reset": "earliest", "isolation.level": "read_committed",
                         "fetch.wait.max.ms": 5, "enable.auto.commit": False})
    # assign, not subscribe: no group join delay inflating the first events' latency
    consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(PARTITIONS)])
    seen: dict[str, float] = {}
    while not stop.is_set():
        for msg in consumer.consume(1000, 0.05):
            if not msg.error():
                now = time.time()
                seen.setdefault(dict(msg.headers())["eventId"].decode(), now)
        while out.poll():
            out.recv()
            out.send(len(seen))
    consumer.close()
    out.send(seen)


def write_at_rate(dsn: str, box: Outbox, rate: int, seconds: float,
                  prefix: str = "w") -> dict[str, float]:
    committed: dict[str, float] = {}
    per_tx, interval = 10, 10 / rate
    with psycopg.connect(dsn) as conn:
        began, n = time.monotonic(), 0
        while time.monotonic() - began < seconds:
            ids = [f"{prefix}{n + k}" for k in range(per_tx)]
            with box.transaction(conn) as tx:
                for k, event_id in enumerate(ids):
                    tx.emit((event_id, f"run-{(n + k) % 100}"))
            now = time.time()
            committed.update({event_id: now for event_id in ids})
            n += per_tx
            time.sleep(max(0.0, began + n / per_tx * interval - time.monotonic()))
    return committed


def latency(dsn: str, bootstrap: str, rate: int, seconds: float) -> list[float]:
    box, topic = setup(dsn, bootstrap, uuid.uuid4().hex[:8])
    relay = start_relay(dsn, bootstrap, box.table, exit_when_idle=False)
    ours, theirs = Pipe()
    stop = multiprocessing.Event()
    reader = multiprocessing.Process(target=consume_into, args=(bootstrap, topic, theirs, stop))
    reader.start()
    warm = write_at_rate(dsn, box, 200, 2.0)  # warm up: producer, metadata, partitions
    wait_for(ours, len(warm), 30)
    committed = write_at_rate(dsn, box, rate, seconds, prefix="m")
    wait_for(ours, len(warm) + len(committed), 30)
    stop.set()
    seen = ours.recv()
    while not isinstance(seen, dict):
        seen = ours.recv()
    reader.join()
    relay.terminate()
    relay.wait(30)
    drop(dsn, box.table)
    missing = set(committed) - set(seen)
    if missing:
        raise SystemExit(f"{len(missing)} events never arrived")
    return sorted(seen[e] - committed[e] for e in committed)


def wait_for(reader: Connection, count: int, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        reader.send("count?")
        if reader.recv() >= count:
            return
        time.sleep(0.1)


def percentile(sorted_values: list[float], q: float) -> float:
    return sorted_values[min(len(sorted_values) - 1, int(q * len(sorted_values)))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--events", type=int, default=50000)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--rate", type=int, default=2000)
    args = parser.parse_args()
    dsn = os.environ.get("RUNFACTS_PG_DSN") or LocalPostgres().start()
    bootstrap = os.environ.get("KAFKA_BOOTSTRAP_SERVERS") or LocalKafka().start()
    rate = throughput(dsn, bootstrap, args.events)
    print(f"throughput: {args.events} events in one backlog -> {rate:,.0f} events/s "
          f"(bar >= 10,000)")
    lat = latency(dsn, bootstrap, args.rate, args.seconds)
    p50, p99 = percentile(lat, 0.50) * 1000, percentile(lat, 0.99) * 1000
    print(f"latency: {len(lat)} events at {args.rate}/s, commit -> consumer-visible "
          f"p50 {p50:.1f} ms, p99 {p99:.1f} ms, max {lat[-1] * 1000:.1f} ms (bar p99 <= 200)")


if __name__ == "__main__":
    main()
