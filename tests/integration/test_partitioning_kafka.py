"""librdkafka's murmur2_random puts each key where runfacts.partitioning says (so readers find runs)."""

from __future__ import annotations

import pytest
from confluent_kafka import Producer
from engine_support import create_topics, read_all

from runfacts.partitioning import PRODUCER_PARTITIONING, partition_for

pytestmark = pytest.mark.integration


def test_partition_for_matches_librdkafka_when_producing_with_murmur2(kafka_bootstrap: str, unique: str) -> None:
    topic = f"part-{unique}"
    create_topics(kafka_bootstrap, [topic], partitions=6)
    producer = Producer({"bootstrap.servers": kafka_bootstrap, **PRODUCER_PARTITIONING})
    keys = [f"run-{unique}-{i}".encode() for i in range(60)]
    for key in keys:
        producer.produce(topic, b"x", key)
    assert producer.flush(30) == 0

    placed = {m.key(): m.partition() for m in read_all(kafka_bootstrap, topic, timeout=10)}

    assert placed == {k: partition_for(k, 6) for k in keys}
    assert len(set(placed.values())) > 1
