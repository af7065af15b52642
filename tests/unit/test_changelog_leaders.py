"""Regression (fresh-clone CI, stop 29): the engine created a changelog, then its restore asked
the new partition's offsets before the broker had applied the creation and stopped on an
unknown partition. prepare_topics now waits until the created topics' partitions have leaders."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from runfacts.processors.engine import changelog
from runfacts.schemas.errors import InfrastructureError


class Admin:
    """Answers metadata for a topic whose partitions get leaders after `lag` lookups."""

    def __init__(self, lag: int, partitions: int = 2) -> None:
        self.lag, self.partitions, self.lookups = lag, partitions, 0

    def list_topics(self, topic: str, timeout: float) -> SimpleNamespace:
        self.lookups += 1
        leader = 1 if self.lookups > self.lag else -1
        found = SimpleNamespace(error=None, partitions={p: SimpleNamespace(leader=leader)
                                                        for p in range(self.partitions)})
        return SimpleNamespace(topics={topic: found})


def test_waits_until_every_created_partition_has_a_leader(monkeypatch) -> None:
    monkeypatch.setattr(changelog.time, "sleep", lambda s: None)
    admin = Admin(lag=3)
    changelog._await_leaders(admin, {"app-runs-changelog": 2}, timeout_s=60)
    assert admin.lookups == 4


def test_names_the_topics_still_without_a_leader_when_time_is_up(monkeypatch) -> None:
    monkeypatch.setattr(changelog.time, "sleep", lambda s: None)
    with pytest.raises(InfrastructureError, match=r"\['app-runs-changelog'\] were created but have no leader") as err:
        changelog._await_leaders(Admin(lag=10**9), {"app-runs-changelog": 2}, timeout_s=0)
    assert err.value.retryable
