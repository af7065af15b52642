"""What a consumer error does to the engine (runner.consume_error): a fatal consumer stops it,
retryable, so its supervisor starts a new one; a wrong topic stops it for good; the rest is
logged while librdkafka recovers."""

from __future__ import annotations

import pytest
from confluent_kafka import KafkaError

from runfacts.processors.engine import runner
from runfacts.processors.engine.runner import consume_error
from runfacts.schemas.errors import InfrastructureError


def test_a_fatal_consumer_handed_on_as_a_message_error_stops_the_engine_retryable() -> None:
    fenced = KafkaError(KafkaError._FATAL, "Static consumer fenced by other consumer with same group.instance.id")
    assert not fenced.fatal()  # as librdkafka hands it on: the code says it, the flag does not
    with pytest.raises(InfrastructureError, match="restart the process") as caught:
        consume_error(fenced)
    assert caught.value.retryable


def test_an_error_flagged_fatal_stops_the_engine() -> None:
    with pytest.raises(InfrastructureError):
        consume_error(KafkaError(KafkaError._FATAL, "fatal", fatal=True))


@pytest.mark.parametrize("code", [KafkaError.UNKNOWN_TOPIC_OR_PART, KafkaError.TOPIC_AUTHORIZATION_FAILED])
def test_a_missing_or_forbidden_topic_stops_the_engine_for_good(code: int) -> None:
    with pytest.raises(InfrastructureError) as caught:
        consume_error(KafkaError(code, "topic"))
    assert not caught.value.retryable


def test_a_transient_error_is_only_logged(monkeypatch: pytest.MonkeyPatch) -> None:
    logged: list[str] = []
    monkeypatch.setattr(runner.log, "warning", lambda fmt, *args: logged.append(fmt % args))
    consume_error(KafkaError(KafkaError._TRANSPORT, "broker down"))
    assert len(logged) == 1 and logged[0].startswith("consumer error") and "broker down" in logged[0]
