"""A run no longer held by the dashboard's feeds is read back from its topic (the one topic reader)."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime

import pytest
from confluent_kafka import Producer
from console_support import refund_story
from decider_support import Scenario

from runfacts.dashboard.feed import FactsFeed, FeedSettings, StateFeed
from runfacts.partitioning import partition_for
from runfacts.schemas.codec import Codec
from runfacts.settings import KafkaSettings
from runfacts.topics import TopicNames, apply_topics, runfacts_topics

pytestmark = pytest.mark.integration


def test_evicted_runs_facts_and_state_are_read_back_from_the_topics(kafka_bootstrap: str):
    names = TopicNames(f"readback{uuid.uuid4().hex[:8]}")
    kafka = KafkaSettings(bootstrap_servers=kafka_bootstrap, topic_prefix=names.prefix)
    apply_topics(kafka, runfacts_topics(names, partitions=2))
    runs = {f"run-{i}": Scenario().given(*refund_story(f"run-{i}", datetime.now(UTC))) for i in range(4)}
    producer, codec = Producer(kafka.client_config()), Codec()
    for run, s in runs.items():  # interleaved on the partitions as the decider would write them
        key = run.encode()
        for event in s.log:
            producer.produce(names.events, codec.encode(event), key, partition=partition_for(key, 2))
        producer.produce(names.state, s.s.model_dump_json().encode(), key, partition=partition_for(key, 2))
    assert producer.flush(30) == 0

    facts = FactsFeed(kafka, FeedSettings(names.events), cache_runs=1).start()
    states = StateFeed(kafka, FeedSettings(names.state), cache_runs=1).start()
    try:
        assert facts.wait_ready(30) and states.wait_ready(30)
        assert facts.cached() == 1 and states.cached() == 1 and len(facts) == len(states) == 4
        first = "run-0" if "run-0" not in facts._held else "run-1"
        read = facts.entries(first)  # not held: read back between its first and last offset
        assert [e.event.eventId for e in read] == [e.eventId for e in runs[first].log]
        assert facts.cached() == 1  # held now, another one dropped
        state = states.get(first)
        assert state is not None and state.runId == first and state.version == runs[first].s.version
        assert states.rows[first].status == "completed"
    finally:
        facts.stop()
        states.stop()
