"""An agent asking for a group session shorter than the broker allows (group.min.session.timeout.ms,
read-only on the broker: Kafka's default 6000 ms, the project's brokers 1000 ms) on the real broker:
by default it joins with the broker's minimum and says so; with RUNFACTS_AGENT_SESSION_FALLBACK
off it fails with a ClientError naming the broker setting (issue 36: fast failover is the broker's
choice too). The requested session is half the running broker's floor, whatever that is."""

from __future__ import annotations

import logging
import threading
import time

import pytest
from confluent_kafka.admin import AdminClient, ConfigResource

from runfacts.client import AgentSettings, ClientError, Runfacts
from runfacts.settings import KafkaSettings
from runfacts.topics import TopicNames, apply_topics, runfacts_topics

pytestmark = pytest.mark.integration


def broker_floor_ms(bootstrap: str) -> int:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    resource = ConfigResource(ConfigResource.Type.BROKER, str(min(admin.list_topics(timeout=10).brokers)))
    return int(admin.describe_configs([resource])[resource].result(timeout=10)["group.min.session.timeout.ms"].value)


def test_a_session_below_the_broker_s_floor_falls_back_to_it_or_fails_naming_the_setting(
        kafka_bootstrap: str, unique: str, caplog: pytest.LogCaptureFixture) -> None:
    kafka = KafkaSettings(bootstrap_servers=kafka_bootstrap)
    names = TopicNames(f"as{unique}")
    apply_topics(kafka, runfacts_topics(names, partitions=2))
    floor = broker_floor_ms(kafka_bootstrap)
    rf = Runfacts.connect(kafka=kafka, prefix=names.prefix)
    try:
        with pytest.raises(ClientError, match=rf"session.timeout.ms={floor // 2} .*group.min.session.timeout.ms "
                                              rf"is {floor} ms\).*restart"):
            rf.agent("strict")(lambda run: None).serve(
                settings=AgentSettings(session_timeout_ms=floor // 2, session_fallback=False))

        agent = rf.agent("lenient")(lambda run: None)
        caplog.set_level(logging.WARNING, logger="runfacts.client.agents")
        lenient = AgentSettings(session_timeout_ms=floor // 2)
        serving = threading.Thread(target=agent.serve, kwargs={"settings": lenient}, daemon=True)
        serving.start()
        deadline = time.monotonic() + 60
        owned: set[int] = set()
        while not owned and time.monotonic() < deadline:
            time.sleep(0.1)
            owned = set(agent._owned)  # noqa: SLF001 - what the group assigned (given back on stop)
        agent.stop()
        serving.join(30)
        assert owned == {0, 1}, "the agent joined no group with the broker's minimum session"
        assert agent.session_timeout_ms == floor
        assert any(f"joining with {floor} ms" in r.getMessage() for r in caplog.records)
    finally:
        rf.close()
