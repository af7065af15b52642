"""Producers wait for every in-sync replica (acks=all): on a replicated cluster with
min.insync.replicas 2 a record is acknowledged only once two brokers have it."""

from __future__ import annotations

import pytest
from confluent_kafka import KafkaException, Producer


def test_idempotent_producers_cannot_be_configured_below_acks_all() -> None:
    """Every runfacts producer (engine, client, relay, crash harness) is idempotent; librdkafka
    then forces acks=all and refuses any weaker setting, so no override can weaken it silently."""
    from runfacts.processors.engine.settings import EngineSettings, producer_config
    from runfacts.workers import decider

    config = producer_config(decider(), EngineSettings())
    assert config["enable.idempotence"] is True and config.get("acks", "all") in ("all", -1, "-1")
    with pytest.raises(KafkaException, match="acks.*must be set to .all"):
        Producer({**config, "acks": "1"})
