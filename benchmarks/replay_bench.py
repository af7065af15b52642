"""Replay speed: events per CPU-second for rebuilding each projection from the events log.

Run: KAFKA_BOOTSTRAP_SERVERS=127.0.0.1:9092 .venv/bin/python benchmarks/replay_bench.py \
        [--events 200000] [--projections audit,trajectory] [--into dir,topic] [--repeat 3]

1. writes a realistic log (RunScript: runs of ~60 events, 28 event types, approvals,
   failures, reconciliations) of about --events events into a fresh 6-partition topic;
2. "core": decode + fold + encode from the message values already in memory (no Kafka):
   the projection's own cost, best of --repeat;
3. "replay -> dir" / "replay -> topic": the real `runfacts replay` path (read_committed
   batch consume, decode only what is needed, fold, write Avro container files or produce
   to a fresh topic), once each.
Rates are events per CPU-second of this process (librdkafka's threads included), the
"per core" figure of the issue's bar (>= 100k events/s); wall-clock rates are shown too.
Topics it creates are deleted at the end.
"""

from __future__ import annotations

import argparse
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path

from runfacts.projections.eventlog import EventReader
from runfacts.projections.kafkalog import ReadOptions, batches, snapshot
from runfacts.projections.replay import ReplaySettings, projectors, relaxed_gc, replay
from runfacts.projections.runlog import RunScript, produce_log
from runfacts.settings import KafkaSettings
from runfacts.topics import TopicSpec, apply_topics, delete_topics

PARTITIONS = 6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=200_000)
    parser.add_argument("--projections", default="audit,trajectory")
    parser.add_argument("--into", default="dir,topic")
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    kafka = KafkaSettings()
    topic = f"bench.run.events.{uuid.uuid4().hex[:8]}"
    created = [topic]
    apply_topics(kafka, [TopicSpec(topic, PARTITIONS)])
    try:
        values = _write_log(kafka, topic, args.events)
        for name in args.projections.split(","):
            _core(name, values, topic, args.repeat)
            for target in args.into.split(","):
                created += _replay(kafka, name, topic, target)
    finally:
        delete_topics(kafka, created)


def _write_log(kafka: KafkaSettings, topic: str, events: int) -> list[tuple[bytes, int, int]]:
    runs = max(1, events // 62)
    start = time.perf_counter()
    count = produce_log(kafka, topic, RunScript(seed=7).log(runs), PARTITIONS)
    print(f"log: {count:,} events of {runs:,} runs in {topic} "
          f"({time.perf_counter() - start:.1f}s to generate and produce)")
    values = [(m.value(), m.partition(), m.offset())
              for batch in batches(kafka, snapshot(kafka, topic)) for m in batch]
    return values


def _core(name: str, values: list[tuple[bytes, int, int]], topic: str, repeat: int) -> None:
    best = float("inf")
    for _ in range(repeat):
        projector = projectors()[name]()
        reader = EventReader(projector.read)
        written: list[int] = [0]
        emit = _counting(written)
        start = time.process_time()
        fact, apply = reader.fact, projector.apply
        with relaxed_gc():
            for value, partition, offset in values:
                apply(fact(value, topic, partition, offset), emit)
            projector.finish(emit)
        best = min(best, time.process_time() - start)
    print(f"  {name:10s} core (decode+fold+encode)  {len(values) / best:>11,.0f} events/CPU-s "
          f"({written[0]:,} records)")


def _counting(written: list[int]) -> Callable[[int, str, bytes | None], None]:
    def emit(partition: int, key: str, body: bytes | None) -> None:
        written[0] += 1

    return emit


def _replay(kafka: KafkaSettings, name: str, topic: str, target: str) -> list[str]:
    with tempfile.TemporaryDirectory() as folder:
        into = str(Path(folder) / "out") + "/" if target == "dir" else f"{topic}.{name}.replay"
        settings = ReplaySettings(name, into, topic, None, ReadOptions(batch_size=20_000))
        report = replay(kafka, settings)
    print(f"  {name:10s} replay -> {target:5s}            {report.events_per_cpu_s:>11,.0f} "
          f"events/CPU-s, {report.events / report.wall_s:>9,.0f} events/s wall "
          f"({report.records:,} records, {report.wall_s:.2f}s)")
    return [] if target == "dir" else [into]


if __name__ == "__main__":
    main()
