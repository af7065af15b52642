"""Proof the broker is a real Kafka: behaviour an imitation would get wrong."""

from __future__ import annotations

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

pytestmark = pytest.mark.integration


def _topic(bootstrap: str, name: str, partitions: int = 1) -> str:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(name, partitions, 1)])[name].result()
    return name


def _consume_all(consumer: Consumer, expected: int, max_polls: int = 60) -> list[bytes]:
    values: list[bytes] = []
    for _ in range(max_polls):
        for msg in consumer.consume(num_messages=100, timeout=0.5):
            assert msg.error() is None, msg.error()
            values.append(msg.value())
        if len(values) >= expected:
            break
    return values


def test_read_committed_consumer_sees_only_committed_records_when_one_batch_aborts(
    kafka_bootstrap: str, unique: str
) -> None:
    topic = _topic(kafka_bootstrap, f"real-txn-{unique}")
    producer = Producer({"bootstrap.servers": kafka_bootstrap, "transactional.id": f"tx-{unique}"})
    producer.init_transactions(30)
    producer.begin_transaction()
    for i in range(3):
        producer.produce(topic, key=b"run-1", value=f"committed-{i}".encode())
    producer.commit_transaction(30)
    producer.begin_transaction()
    for i in range(2):
        producer.produce(topic, key=b"run-1", value=f"aborted-{i}".encode())
    producer.flush(10)
    producer.abort_transaction(30)
    producer.begin_transaction()
    producer.produce(topic, key=b"run-1", value=b"committed-3")
    producer.commit_transaction(30)

    consumer = Consumer({
        "bootstrap.servers": kafka_bootstrap, "group.id": f"g-{unique}",
        "isolation.level": "read_committed", "auto.offset.reset": "earliest",
    })
    consumer.subscribe([topic])
    values = _consume_all(consumer, expected=4)
    # 4 committed data records + 2 aborted + 3 transaction markers: the log end is 9.
    low, high = consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)
    consumer.close()
    assert values == [b"committed-0", b"committed-1", b"committed-2", b"committed-3"]
    assert (low, high) == (0, 9)


def test_consumer_group_resumes_at_committed_offset_when_restarted(
    kafka_bootstrap: str, unique: str
) -> None:
    topic = _topic(kafka_bootstrap, f"real-group-{unique}")
    producer = Producer({"bootstrap.servers": kafka_bootstrap})
    for i in range(10):
        producer.produce(topic, value=str(i).encode())
    producer.flush(10)
    conf = {"bootstrap.servers": kafka_bootstrap, "group.id": f"g-{unique}",
            "auto.offset.reset": "earliest", "enable.auto.commit": False}

    first = Consumer(conf)
    first.subscribe([topic])
    seen = _consume_all(first, expected=10)[:4]
    first.commit(offsets=[TopicPartition(topic, 0, 4)], asynchronous=False)
    first.close()

    second = Consumer(conf)
    second.subscribe([topic])
    rest = _consume_all(second, expected=6)
    committed = second.committed([TopicPartition(topic, 0)], timeout=10)[0].offset
    second.close()
    assert seen == [b"0", b"1", b"2", b"3"]
    assert rest == [str(i).encode() for i in range(4, 10)]
    assert committed == 4
