"""Reading a topic range: the snapshot's retries (broker-free, with a stand-in client)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException

from runfacts import logread
from runfacts.schemas.errors import InfrastructureError
from runfacts.settings import KafkaSettings


class _Client:
    """Answers like a consumer on a fresh 2-partition topic; fails the first `failures`
    watermark requests with `code`."""

    def __init__(self, code: int, failures: int) -> None:
        self.code, self.failures = code, failures

    def list_topics(self, topic: str, timeout: float) -> Any:
        partitions = {0: object(), 1: object()}
        return SimpleNamespace(topics={topic: SimpleNamespace(error=None, partitions=partitions)})

    def get_watermark_offsets(self, tp: Any, timeout: float, cached: bool) -> tuple[int, int]:
        if self.failures:
            self.failures -= 1
            raise KafkaException(KafkaError(self.code))
        return 0, 5 + tp.partition

    def close(self) -> None:
        return None


def _snapshot(monkeypatch: pytest.MonkeyPatch, client: _Client) -> logread.LogRange:
    monkeypatch.setattr(logread, "consumer", lambda settings, options=None: client)
    monkeypatch.setattr(logread.time, "sleep", lambda seconds: None)
    return logread.log_range(KafkaSettings(bootstrap_servers="unused:9092"), "t", timeout=5)


@pytest.mark.parametrize("code", [KafkaError.NOT_LEADER_FOR_PARTITION,
                                  KafkaError.LEADER_NOT_AVAILABLE])
def test_snapshot_retries_when_a_fresh_topic_has_no_leader_yet(monkeypatch, code) -> None:
    log = _snapshot(monkeypatch, _Client(code, failures=2))
    assert (log.start, log.end) == ({0: 0, 1: 0}, {0: 5, 1: 6})


def test_snapshot_raises_when_the_broker_refuses_for_good(monkeypatch) -> None:
    with pytest.raises(InfrastructureError, match="TOPIC_AUTHORIZATION_FAILED"):
        _snapshot(monkeypatch, _Client(KafkaError.TOPIC_AUTHORIZATION_FAILED, failures=1))
