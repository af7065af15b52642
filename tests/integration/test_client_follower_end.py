"""The client follower knows it has read a command's whole answer as soon as the fetch that
brought the answer says the partition ends there (its high watermark: the record, then its
transaction's commit marker), not when librdkafka's partition EOF arrives one
`fetch.wait.max.ms` later (issue 34: every `start_run` and `propose` waited those 20 ms).
The follower here fetches with an 8-s wait, so its EOF comes ~8 s after the record."""

from __future__ import annotations

import time
import uuid
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer
from engine_support import create_topics

from runfacts.client.follower import Follower, FollowerSettings
from runfacts.client.outcomes import Resolved
from runfacts.partitioning import PRODUCER_PARTITIONING, partition_for
from runfacts.settings import KafkaSettings
from runfacts.topics import group_prefix, reader_group

pytestmark = pytest.mark.integration


class SlowEofFollower(Follower):
    """The follower with its fetches waiting 8 s for data (its EOFs come that late)."""

    def _new_consumer(self, reset: str) -> Consumer:
        return Consumer(self.kafka.client_config(**{
            "group.id": reader_group(group_prefix(self.settings.prefix, self.settings.component)),
            "enable.auto.commit": False, "enable.partition.eof": True, "isolation.level": "read_committed",
            "auto.offset.reset": reset, "fetch.wait.max.ms": 8_000}))


def test_a_committed_answer_is_known_complete_without_waiting_for_the_partition_eof(
        kafka_bootstrap: str, unique: str) -> None:
    topic = f"follow-{unique}"
    create_topics(kafka_bootstrap, [topic], partitions=2)
    follower = SlowEofFollower(KafkaSettings(bootstrap_servers=kafka_bootstrap),
                               FollowerSettings(topic, prefix=f"t{unique}", metadata_timeout_s=60))
    try:
        journal = follower.watch("run-a", backfill=False)
        other = next(k for k in (f"run-{i}" for i in range(100))
                     if k != "run-a" and partition_for(k.encode(), 2) == journal.partition)
        producer = Producer({"bootstrap.servers": kafka_bootstrap, "transactional.id": f"t-{uuid.uuid4().hex}",
                             **PRODUCER_PARTITIONING})
        producer.init_transactions()
        producer.begin_transaction()
        offsets: list[int] = []
        producer.produce(topic, b"answer", other.encode(), on_delivery=lambda _e, m: offsets.append(m.offset()))
        producer.commit_transaction()
        (offset,) = offsets

        def past_it(_journal: Any) -> Resolved | None:  # what a command's answer check asks of the follower
            return Resolved(True) if follower.caught_up_to(journal.partition) > offset else None

        started = time.monotonic()
        waiter = follower.add_waiter(journal, past_it, tail=True)
        assert waiter.done.wait(5), "the follower waited for the partition EOF (8 s) to know the answer was whole"
        assert time.monotonic() - started < 5
    finally:
        follower.close()
