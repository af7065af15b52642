"""On the real broker: a run state stored before `evidence` existed gets its evidence window back
from the run's events topic (`history.EventHistory`), the runs of one partition read in one pass."""

from __future__ import annotations

import decider_support as support
import pytest
from confluent_kafka import Producer
from engine_support import create_topics

from runfacts.partitioning import partition_for
from runfacts.processors.decider.history import EventHistory
from runfacts.processors.decider.state import EVIDENCE_TYPES
from runfacts.schemas.codec import Codec

pytestmark = pytest.mark.integration


def test_history_gives_the_runs_evidence_grade_events_in_log_order_when_read_from_the_events_topic(
        kafka_bootstrap: str, unique: str) -> None:
    topic = f"runfacts.run.events.{unique}"
    create_topics(kafka_bootstrap, [topic], partitions=3)
    log = support.approved_refund().given(support.claim(), support.completed()).log
    other = support.Scenario().given(support.create(run="run-other")).log  # no evidence-grade event
    codec, producer = Codec(), Producer({"bootstrap.servers": kafka_bootstrap})
    for event in [*log, *other]:
        key = event.runId.encode()
        producer.produce(topic, codec.encode(event), key, partition=partition_for(key, 3))
    assert producer.flush(30) == 0

    history = EventHistory({"bootstrap.servers": kafka_bootstrap}, topic, timeout_s=30)
    found = history(support.RUN)

    expected = [(e.eventId, e.eventType) for e in log if e.eventType in EVIDENCE_TYPES]
    assert found == expected and any(t == "tool.call.completed" for _, t in found)
    assert history("run-other") == [] and history("run-never-seen") == []
