"""`runfacts demo`: the main job, end to end against a real broker."""

from __future__ import annotations

import time

import typer
from confluent_kafka import Consumer, Producer, TopicPartition
from rich.console import Console

from runfacts.devenv import LocalKafka
from runfacts.settings import KafkaSettings
from runfacts.topics import TopicNames, apply_topics, runfacts_topics

console = Console()


def _ensure_broker(settings: KafkaSettings) -> None:
    local = LocalKafka()
    if settings.bootstrap_servers == local.bootstrap and not local.is_up():
        console.print("starting the local Kafka broker (scripts/kafka.sh start)…")
        local.start()


def demo() -> None:
    """Start the broker if needed, provision topics, commit a command transactionally, read it back."""
    settings = KafkaSettings()
    _ensure_broker(settings)
    names = TopicNames(settings.topic_prefix)
    report = apply_topics(settings, runfacts_topics(names, settings.partitions))
    console.print(f"topics: {len(report.created)} created, {len(report.unchanged)} unchanged, "
                  f"{len(report.altered)} altered")
    run_id = f"run-demo-{int(time.time())}"
    producer = Producer(settings.client_config(**{"transactional.id": f"runfacts-demo-{run_id}"}))
    producer.init_transactions(30)
    producer.begin_transaction()
    producer.produce(names.commands, key=run_id.encode(), value=b'{"commandType":"run.create"}')
    producer.commit_transaction(30)
    consumer = Consumer(settings.client_config(**{
        "group.id": f"runfacts-demo-{run_id}", "isolation.level": "read_committed",
        "enable.auto.commit": False}))
    found = _read_back(consumer, names.commands, run_id)
    consumer.close()
    if not found:
        raise typer.Exit(1)
    console.print(f"[green]ok[/]: command for {run_id} committed and read back from {names.commands}")


def _read_back(consumer: Consumer, topic: str, run_id: str) -> bool:
    meta = consumer.list_topics(topic, timeout=10).topics[topic]
    parts = [TopicPartition(topic, p) for p in meta.partitions]
    ends = {tp.partition: consumer.get_watermark_offsets(tp, timeout=10)[1] for tp in parts}
    consumer.assign([TopicPartition(topic, p, max(0, ends[p] - 50)) for p in ends])
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        for msg in consumer.consume(100, timeout=0.5):
            if msg.error() is None and msg.key() == run_id.encode():
                return True
    return False
