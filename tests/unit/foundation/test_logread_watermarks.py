"""Regression (fresh-clone CI): a just-created partition without a leader yet
stopped the engine at assignment ("Failed to get watermark offsets: Unknown partition")."""

from __future__ import annotations

import pytest
from confluent_kafka import KafkaError, KafkaException, TopicPartition

from runfacts import logread
from runfacts.schemas.errors import InfrastructureError


class FlakyConsumer:
    def __init__(self, failures: list[int]) -> None:
        self.failures = failures
        self.calls = 0

    def get_watermark_offsets(self, tp: TopicPartition, timeout: float, cached: bool) -> tuple[int, int]:
        self.calls += 1
        if self.failures:
            raise KafkaException(KafkaError(self.failures.pop(0)))
        return (0, 42)


def test_watermarks_wait_for_a_leader_when_the_changelog_was_just_created(monkeypatch) -> None:
    monkeypatch.setattr(logread.time, "sleep", lambda s: None)
    consumer = FlakyConsumer([KafkaError._UNKNOWN_PARTITION, KafkaError.NOT_LEADER_FOR_PARTITION])
    assert logread.watermarks(consumer, TopicPartition("c", 0)) == (0, 42)
    assert consumer.calls == 3


def test_watermarks_raise_at_once_when_the_error_is_not_transient() -> None:
    consumer = FlakyConsumer([KafkaError.TOPIC_AUTHORIZATION_FAILED])
    with pytest.raises(InfrastructureError, match=r"offsets of c\[0\]"):
        logread.watermarks(consumer, TopicPartition("c", 0))
    assert consumer.calls == 1
