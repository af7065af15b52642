"""`topics apply` on a replicated cluster: min.insync.replicas 2 whenever a topic has more than one replica."""

from __future__ import annotations

from runfacts.topics import TopicNames, TopicSpec, replicated_configs, runfacts_topics


def test_replicated_topics_get_min_insync_replicas_2_and_single_replica_topics_keep_the_broker_default() -> None:
    for spec in runfacts_topics(TopicNames("t"), 3):
        assert replicated_configs(spec, 3)["min.insync.replicas"] == "2"
        assert replicated_configs(spec, 2)["min.insync.replicas"] == "2"
        assert "min.insync.replicas" not in replicated_configs(spec, 1)
        assert "min.insync.replicas" not in replicated_configs(spec, -1)  # the broker's default RF


def test_a_spec_that_pins_its_own_min_insync_replicas_keeps_it() -> None:
    spec = TopicSpec("t.run.events", 3, configs={"min.insync.replicas": "3"})
    assert replicated_configs(spec, 3)["min.insync.replicas"] == "3"
