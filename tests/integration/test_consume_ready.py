"""`runfacts.logread.consume_ready` on the real broker: librdkafka's `consume(n, timeout)` returns
early only with n messages, so the client follower's `consume(500, 0.1)` held every lone answer
until its 0.1 s were up (issue 34: each client step on a 100 ms multiple). consume_ready hands
over what has arrived as soon as the first message is there, and a backlog in full batches."""

from __future__ import annotations

import time

import pytest
from confluent_kafka import Consumer, TopicPartition
from engine_support import create_topics, produce

from runfacts.logread import consume_ready

pytestmark = pytest.mark.integration


def _reader(bootstrap: str, topic: str) -> Consumer:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"{topic}-reader",
                         "enable.auto.commit": False, "auto.offset.reset": "earliest"})
    consumer.assign([TopicPartition(topic, 0, 0)])
    return consumer


def test_a_lone_message_is_handed_over_before_the_timeout_is_up(kafka_bootstrap: str, unique: str) -> None:
    topic = f"ready-{unique}"
    create_topics(kafka_bootstrap, [topic], partitions=1)
    produce(kafka_bootstrap, topic, [(b"k", b"one")])
    consumer = _reader(kafka_bootstrap, topic)
    try:
        started = time.monotonic()
        got = consume_ready(consumer, 500, 60.0)
        waited = time.monotonic() - started
    finally:
        consumer.close()
    assert [m.value() for m in got] == [b"one"]
    assert waited < 30, f"waited {waited:.1f}s: the 60-s timeout, not the message, ended the wait"


def test_a_backlog_comes_in_batches_of_the_limit(kafka_bootstrap: str, unique: str) -> None:
    topic = f"ready-{unique}"
    create_topics(kafka_bootstrap, [topic], partitions=1)
    produce(kafka_bootstrap, topic, [(b"k", str(i).encode()) for i in range(300)])
    consumer = _reader(kafka_bootstrap, topic)
    try:
        values: list[bytes] = []
        while len(values) < 300:
            batch = consume_ready(consumer, 100, 10.0)
            assert batch, "the backlog stopped short"
            assert len(batch) <= 100
            values += [m.value() for m in batch]
        assert consume_ready(consumer, 100, 0.5) == []  # drained: the timeout ends an empty wait
    finally:
        consumer.close()
    assert values == [str(i).encode() for i in range(300)]
