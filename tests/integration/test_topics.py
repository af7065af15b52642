"""Topic provisioning as code against the real broker."""

from __future__ import annotations

import pytest
from confluent_kafka.admin import AdminClient, ConfigResource

from runfacts.settings import KafkaSettings
from runfacts.topics import (
    TopicMismatch,
    TopicNames,
    TopicSpec,
    apply_topics,
    delete_topics,
    runfacts_topics,
)

pytestmark = pytest.mark.integration


@pytest.fixture
def names(kafka_bootstrap: str, unique: str):
    names = TopicNames(f"t{unique}")
    yield names
    delete_topics(KafkaSettings(bootstrap_servers=kafka_bootstrap),
                  [s.name for s in runfacts_topics(names)])


def test_apply_topics_creates_then_is_a_no_op_when_applied_twice(kafka_bootstrap: str, names) -> None:
    settings = KafkaSettings(bootstrap_servers=kafka_bootstrap)
    specs = runfacts_topics(names, partitions=6)
    first = apply_topics(settings, specs)
    second = apply_topics(settings, specs)
    assert sorted(first.created) == sorted(s.name for s in specs)
    assert second.created == [] and second.altered == {}
    assert sorted(second.unchanged) == sorted(s.name for s in specs)
    admin = AdminClient(settings.client_config())
    meta = admin.list_topics(timeout=10).topics
    single = {names.decider_versions, names.metrics, names.keys, names.tool_control}  # not runId-keyed: one partition
    assert {len(meta[s.name].partitions) for s in specs if s.name not in single} == {6}
    assert {len(meta[name].partitions) for name in single} == {1}
    res = ConfigResource(ConfigResource.Type.TOPIC, names.decider_versions)
    assert admin.describe_configs([res])[res].result()["cleanup.policy"].value == "compact"
    res = ConfigResource(ConfigResource.Type.TOPIC, names.user_view)
    conf = admin.describe_configs([res])[res].result()
    assert conf["cleanup.policy"].value == "compact"
    res = ConfigResource(ConfigResource.Type.TOPIC, names.audit)
    assert admin.describe_configs([res])[res].result()["retention.ms"].value == "-1"


def test_apply_topics_realigns_retention_when_it_drifted(kafka_bootstrap: str, names) -> None:
    settings = KafkaSettings(bootstrap_servers=kafka_bootstrap)
    apply_topics(settings, runfacts_topics(names))
    changed = [TopicSpec(names.commands, 6, "delete", 60_000)]
    report = apply_topics(settings, changed)
    assert report.altered == {names.commands: {"retention.ms": "60000"}}


def test_apply_topics_refuses_when_partitions_disagree(kafka_bootstrap: str, names) -> None:
    settings = KafkaSettings(bootstrap_servers=kafka_bootstrap)
    apply_topics(settings, runfacts_topics(names))
    with pytest.raises(TopicMismatch, match=rf"{names.events} partitions.*spec wants 3"):
        apply_topics(settings, [TopicSpec(names.events, 3)])


def test_apply_topics_refuses_when_cleanup_policy_disagrees(kafka_bootstrap: str, names) -> None:
    settings = KafkaSettings(bootstrap_servers=kafka_bootstrap)
    apply_topics(settings, runfacts_topics(names))
    with pytest.raises(TopicMismatch, match="cleanup.policy"):
        apply_topics(settings, [TopicSpec(names.events, 6, "compact")])
