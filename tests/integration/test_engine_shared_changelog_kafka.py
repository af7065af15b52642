"""A store whose changelog is a topic the application owns, on a real broker: the start-up
checks of that topic and the upgrade of a store that reflects the engine's own changelog."""

from __future__ import annotations

import dataclasses
import logging
from pathlib import Path

import pytest
from confluent_kafka.admin import AdminClient, NewTopic
from engine_support import counter_on, counter_topics, produce, settings

from runfacts.processors.engine.changelog import Restorer, prepare_topics
from runfacts.processors.engine.store import RocksBackend, changelog_key, changelog_topic_key
from runfacts.schemas.errors import ConfigError

pytestmark = pytest.mark.integration


def _topic(bootstrap: str, name: str, partitions: int, config: dict[str, str]) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.create_topics([NewTopic(name, partitions, 1, config=config)]).values():
        future.result()


@pytest.fixture
def app(kafka_bootstrap: str, unique: str):
    return counter_on("sc", unique, counter_topics(kafka_bootstrap, "sc", unique, 1), idle_ms=3_600_000)


def test_prepare_topics_refuses_a_shared_changelog_that_would_lose_state(
        kafka_bootstrap: str, unique: str, app, tmp_path: Path) -> None:
    conf = settings(kafka_bootstrap, tmp_path, "a")
    missing = dataclasses.replace(app, changelogs={"counts": f"sc-missing-{unique}"})
    with pytest.raises(ConfigError, match=f"sc-missing-{unique}.*runfacts topics apply"):
        prepare_topics(missing, conf)
    deleting = f"sc-deleting-{unique}"
    _topic(kafka_bootstrap, deleting, 1, {"cleanup.policy": "delete", "retention.ms": "86400000"})
    with pytest.raises(ConfigError, match=f"{deleting}.*cleanup.policy=delete.*set cleanup.policy=compact"):
        prepare_topics(dataclasses.replace(app, changelogs={"counts": deleting}), conf)
    wide = f"sc-wide-{unique}"
    _topic(kafka_bootstrap, wide, 3, {"cleanup.policy": "compact"})
    with pytest.raises(ConfigError, match=f"{wide}.*has 3 partitions, the sources 1"):
        prepare_topics(dataclasses.replace(app, changelogs={"counts": wide}), conf)
    shared = f"sc-state-{unique}"
    _topic(kafka_bootstrap, shared, 1, {"cleanup.policy": "compact"})
    assert prepare_topics(dataclasses.replace(app, changelogs={"counts": shared}), conf) == 1
    topics = AdminClient({"bootstrap.servers": kafka_bootstrap}).list_topics(timeout=10).topics
    assert app.default_changelog_topic("counts") not in topics  # never created for it
    assert app.default_changelog_topic("__timers") in topics


def test_a_store_of_the_old_changelog_is_rebuilt_from_the_shared_topic_from_offset_zero(
        kafka_bootstrap: str, unique: str, app, tmp_path: Path,
        caplog: pytest.LogCaptureFixture) -> None:
    conf = settings(kafka_bootstrap, tmp_path, "a")
    prepare_topics(app, conf)
    shared = f"sc-state-{unique}"
    _topic(kafka_bootstrap, shared, 1, {"cleanup.policy": "compact"})
    produce(kafka_bootstrap, shared, [(b"k0", b"1"), (b"k1", b"1"), (b"k0", b"2")])
    backend = RocksBackend(tmp_path / "p0", app.all_stores)  # the old layout: offset 1 of its own
    backend.write({"counts": {b"k0": b"2", b"stale": b"9"}}, {changelog_key("counts"): b"1"})
    new = dataclasses.replace(app, changelogs={"counts": shared})
    prepare_topics(new, conf)
    restorer = Restorer(new, conf)
    try:
        with caplog.at_level(logging.WARNING, "runfacts.engine"):
            assert restorer.restore({0: backend}) == 3  # from 0: offset 1 is not the shared topic's
        assert dict(backend.scan("counts", b"", b"\xff")) == {b"k0": b"2", b"k1": b"1"}
        meta = backend.meta()
        assert meta[changelog_key("counts")] == b"2"
        assert meta[changelog_topic_key("counts")] == shared.encode()
        assert any("its changelog moved" in r.message for r in caplog.records)
        assert restorer.restore({0: backend}) == 0  # current now: no second rebuild
    finally:
        restorer.close()
        backend.close()
