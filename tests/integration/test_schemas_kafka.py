"""The codec through a real broker: bytes, headers and positions survive Kafka."""

from __future__ import annotations

import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient, NewTopic

from runfacts.schemas import codec
from runfacts.schemas.catalog import default_catalog
from runfacts.schemas.errors import InvalidInput, RecordPosition
from runfacts.schemas.spec.samples import sample

pytestmark = pytest.mark.integration
CATALOG = default_catalog()
TYPES = ("run.created", "approval.required", "tool.call.failed", "run.resume")


def _topic(bootstrap: str, name: str) -> str:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.create_topics([NewTopic(name, num_partitions=1, replication_factor=1)])
    futures[name].result(timeout=30)
    return name


def _consume(bootstrap: str, topic: str, group: str, count: int) -> list:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group,
                         "auto.offset.reset": "earliest", "enable.auto.commit": False})
    consumer.subscribe([topic])
    messages = []
    try:
        for _ in range(100):
            msg = consumer.poll(0.5)
            if msg is not None and msg.error() is None:
                messages.append(msg)
            if len(messages) == count:
                break
    finally:
        consumer.close()
    return messages


def test_models_round_trip_with_headers_when_sent_through_kafka(kafka_bootstrap: str,
                                                                unique: str) -> None:
    topic = _topic(kafka_bootstrap, f"contract.events.{unique}")
    models = [codec.decode(codec.encode(codec.decode(
        codec.default_codec().encode_dict(sample(CATALOG.by_type[t], seed=i)))))
        for i, t in enumerate(TYPES)]
    producer = Producer({"bootstrap.servers": kafka_bootstrap, "enable.idempotence": True})
    for model in models:
        producer.produce(topic, key=model.runId.encode(), value=codec.encode(model),
                         headers=codec.headers(model))
    assert producer.flush(30) == 0
    messages = _consume(kafka_bootstrap, topic, f"contract-{unique}", len(models))
    decoded = [codec.decode(m.value(), RecordPosition(m.topic(), m.partition(), m.offset()),
                            m.headers()) for m in messages]
    assert decoded == models
    assert [m.headers() for m in messages] == [codec.headers(m) for m in models]


def test_bad_record_names_its_kafka_position_when_consumed(kafka_bootstrap: str,
                                                           unique: str) -> None:
    topic = _topic(kafka_bootstrap, f"contract.bad.{unique}")
    good = codec.default_codec().encode_dict(sample(CATALOG.by_type["approval.required"]))
    producer = Producer({"bootstrap.servers": kafka_bootstrap})
    producer.produce(topic, value=good)
    producer.produce(topic, value=good[:-5], headers=[("eventType", b"approval.required")])
    assert producer.flush(30) == 0
    first, second = _consume(kafka_bootstrap, topic, f"contract-{unique}", 2)
    assert codec.decode(first.value()).eventType == "approval.required"
    position = RecordPosition(second.topic(), second.partition(), second.offset())
    with pytest.raises(InvalidInput) as err:
        codec.decode(second.value(), position, second.headers())
    assert str(err.value).startswith(f"{topic}[0]@1: runfacts.events.ApprovalRequired v2:")
    assert dict(err.value.headers())["dlq.offset"] == b"1"
