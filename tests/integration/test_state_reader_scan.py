"""StateReader.scan on the real broker: a second scan reads only what was appended since the
first and decodes only the runs it changed; updates and tombstones land."""

from __future__ import annotations

import pytest
from confluent_kafka import Producer
from decider_support import Scenario, create
from engine_support import create_topics

from runfacts.ops.client import StateReader
from runfacts.processors.decider.state_json import dump_state
from runfacts.settings import KafkaSettings
from runfacts.topics import TopicNames

pytestmark = pytest.mark.integration


def _put(bootstrap: str, topic: str, records: list[tuple[str, bytes | None]]) -> None:
    producer = Producer({"bootstrap.servers": bootstrap})
    for key, value in records:
        producer.produce(topic, value, key.encode())
    assert producer.flush(30) == 0


def _state(run: str, summary: str) -> bytes:
    return dump_state(Scenario().given(create(run=run)).s.model_copy(update={"goalSummary": summary}))[0]


def test_a_second_scan_decodes_only_the_runs_changed_since_the_first(kafka_bootstrap: str, unique: str) -> None:
    names = TopicNames(f"scan{unique}")
    create_topics(kafka_bootstrap, [names.state], partitions=3)
    _put(kafka_bootstrap, names.state, [(f"run-{i}", _state(f"run-{i}", "first")) for i in range(30)])
    reader = StateReader(KafkaSettings(bootstrap_servers=kafka_bootstrap), names)

    first = reader.scan()
    assert sorted(first) == sorted(f"run-{i}" for i in range(30))
    assert reader.decoded_states == 30

    _put(kafka_bootstrap, names.state, [("run-3", _state("run-3", "second")), ("run-7", None),
                                        ("run-30", _state("run-30", "new"))])
    second = reader.scan()
    assert reader.decoded_states == 30 + 2, "only the changed runs were decoded (a tombstone needs none)"
    assert "run-7" not in second and second["run-30"].goalSummary == "new"
    assert second["run-3"].goalSummary == "second" and second["run-4"].goalSummary == "first"
    assert len(second) == 30
    assert reader.scan() == second and reader.decoded_states == 32, "nothing appended: nothing read"
    assert StateReader(KafkaSettings(bootstrap_servers=kafka_bootstrap), names).scan() == second
