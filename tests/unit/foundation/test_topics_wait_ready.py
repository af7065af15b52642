"""Regression (fresh-clone CI, stop 29): the engine created a changelog, then its restore asked
the new partition's offsets before the broker had applied the creation and stopped on an
unknown partition. Whoever creates topics (`apply_topics`, the engine's changelogs) now waits
with `topics.wait_ready` until the topics are listed and every partition has a leader."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from confluent_kafka import KafkaError, KafkaException

from runfacts import topics
from runfacts.processors.engine import changelog
from runfacts.schemas.errors import InfrastructureError


class Admin:
    """Lists `name` with no partitions, then partitions without a leader, then with leaders."""

    def __init__(self, name: str, unlisted: int, leaderless: int) -> None:
        self.name, self.unlisted, self.leaderless, self.lookups = name, unlisted, leaderless, 0
        self.created: list[str] = []

    def list_topics(self, timeout: float) -> SimpleNamespace:
        self.lookups += 1
        if self.lookups <= self.unlisted:
            return SimpleNamespace(topics={})
        leader = -1 if self.lookups <= self.unlisted + self.leaderless else 1
        found = SimpleNamespace(error=None, partitions={p: SimpleNamespace(leader=leader) for p in range(2)})
        return SimpleNamespace(topics={self.name: found})

    def create_topics(self, new: list, request_timeout: float) -> dict:
        self.created += [t.topic for t in new]
        return {t.topic: SimpleNamespace(result=lambda: None) for t in new}


def test_waits_until_every_partition_of_a_listed_topic_has_a_leader(monkeypatch) -> None:
    monkeypatch.setattr(topics.time, "sleep", lambda s: None)
    admin = Admin("app-runs-changelog", unlisted=1, leaderless=2)
    assert "app-runs-changelog" in topics.wait_ready(admin, ["app-runs-changelog"], timeout=60)
    assert admin.lookups == 4


def test_names_the_topics_still_without_a_leader_when_time_is_up(monkeypatch) -> None:
    monkeypatch.setattr(topics.time, "sleep", lambda s: None)
    admin = Admin("app-runs-changelog", unlisted=0, leaderless=10**9)
    with pytest.raises(InfrastructureError, match=r"leader for every partition.*\['app-runs-changelog'\]") as err:
        topics.wait_ready(admin, ["app-runs-changelog"], timeout=0)
    assert err.value.retryable


def test_the_engine_waits_for_the_changelogs_it_creates(monkeypatch) -> None:
    monkeypatch.setattr(topics.time, "sleep", lambda s: None)
    admin = Admin("app-orphans-changelog", unlisted=0, leaderless=3)
    changelog._create(admin, [changelog.NewTopic("app-orphans-changelog", 2, 1)])
    assert admin.created == ["app-orphans-changelog"] and admin.lookups == 4


def test_a_changelog_another_instance_created_first_is_waited_for_too(monkeypatch) -> None:
    monkeypatch.setattr(topics.time, "sleep", lambda s: None)
    admin = Admin("app-orphans-changelog", unlisted=2, leaderless=0)

    def exists() -> None:
        raise KafkaException(KafkaError(KafkaError.TOPIC_ALREADY_EXISTS))
    admin.create_topics = lambda new, request_timeout: {t.topic: SimpleNamespace(result=exists) for t in new}
    changelog._create(admin, [changelog.NewTopic("app-orphans-changelog", 2, 1)])
    assert admin.lookups == 3
