"""A hub's start asks again while a partition has no leader yet (a topic just made, a leader
election) and gives up on any other error or after its deadline: the gateway's streams of a
topic made a moment before it started do not fail with NOT_LEADER_FOR_PARTITION."""

from __future__ import annotations

from concurrent.futures import Future
from types import SimpleNamespace

import pytest
from confluent_kafka import KafkaError, KafkaException, TopicPartition

from runfacts.gateway.streams import _stable_offsets


class Admin:
    """list_offsets answering with the errors given, then with offset 7 for every partition."""

    def __init__(self, *errors: int) -> None:
        self.errors, self.asked = list(errors), 0

    def list_offsets(self, specs: dict, **_: object) -> dict:
        self.asked += 1
        answers = {}
        for tp in specs:
            future: Future = Future()
            if self.errors:
                future.set_exception(KafkaException(KafkaError(self.errors[0])))
            else:
                future.set_result(SimpleNamespace(offset=7))
            answers[tp] = future
        if self.errors:
            self.errors.pop(0)
        return answers


PARTS = [TopicPartition("t", 0), TopicPartition("t", 1)]


def test_a_partition_without_a_leader_yet_is_asked_again() -> None:
    admin = Admin(KafkaError.NOT_LEADER_FOR_PARTITION, KafkaError.LEADER_NOT_AVAILABLE)
    assert _stable_offsets(admin, PARTS, 5.0) == {0: 7, 1: 7}  # type: ignore[arg-type]
    assert admin.asked == 3


def test_another_error_is_raised_at_once() -> None:
    admin = Admin(KafkaError.TOPIC_AUTHORIZATION_FAILED)
    with pytest.raises(KafkaException):
        _stable_offsets(admin, PARTS, 5.0)  # type: ignore[arg-type]
    assert admin.asked == 1


def test_no_leader_past_the_deadline_is_raised() -> None:
    admin = Admin(*[KafkaError.NOT_LEADER_FOR_PARTITION] * 50)
    with pytest.raises(KafkaException):
        _stable_offsets(admin, PARTS, 0.0)  # type: ignore[arg-type]
    assert admin.asked == 1
