"""Restore and resume on a real broker, against what another instance left behind: a changelog
whose last stable offset an open transaction pins (issue 18 item 1), a changelog shorter than
the store (item 5), group offsets lost while the store is intact (item 6)."""

from __future__ import annotations

import logging
import os
import signal
import threading
import time
from pathlib import Path

import pytest
from confluent_kafka import ConsumerGroupTopicPartitions, Producer, TopicPartition
from confluent_kafka.admin import AdminClient
from engine_support import EngineThread, create_topics, keyed, outputs, produce, settings

from runfacts.dev.apps import counter_app
from runfacts.processors.engine.changelog import Restorer, prepare_topics
from runfacts.processors.engine.store import MemoryBackend, RocksBackend, changelog_key
from runfacts.schemas.errors import InfrastructureError

pytestmark = pytest.mark.integration


@pytest.fixture
def app(kafka_bootstrap: str, unique: str):
    names = (f"rs-in-{unique}", f"rs-out-{unique}", f"rs-dlq-{unique}")
    create_topics(kafka_bootstrap, names, partitions=1)
    return counter_app(name=f"rs-{unique}", source=names[0], output=names[1],
                       dead_letter_topic=names[2], idle_ms=3_600_000)


def transactional(bootstrap: str, txn_id: str) -> Producer:
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": txn_id,
                         "transaction.timeout.ms": 60_000})
    producer.init_transactions(30)
    return producer


def commit(producer: Producer, topic: str, records: list[tuple[bytes, bytes]]) -> None:
    producer.begin_transaction()
    for key, value in records:
        producer.produce(topic, value, key, partition=0)
    producer.commit_transaction(30)


def pinned_changelog(bootstrap: str, topic: str, unique: str) -> Producer:
    """k0 committed (offset 0, marker 1); another instance's transaction left open on x
    (offset 2: the LSO stays there); then the owner commits k1, k2 (offsets 3, 4, marker 5)."""
    owner = transactional(bootstrap, f"owner-{unique}")
    commit(owner, topic, [(b"k0", b"v0")])
    zombie = transactional(bootstrap, f"zombie-{unique}")
    zombie.begin_transaction()
    zombie.produce(topic, b"uncommitted", b"x", partition=0)
    assert zombie.flush(30) == 0
    commit(owner, topic, [(b"k1", b"v1"), (b"k2", b"v2")])
    return zombie


def restore(app, conf, backend) -> tuple[int, float]:
    restorer = Restorer(app, conf)
    started = time.monotonic()
    try:
        return restorer.restore({0: backend}), time.monotonic() - started
    finally:
        restorer.close()


def test_restore_waits_for_open_transaction_and_restores_records_committed_after_it(
        kafka_bootstrap: str, unique: str, app, tmp_path: Path,
        caplog: pytest.LogCaptureFixture) -> None:
    conf = settings(kafka_bootstrap, tmp_path, "a")
    prepare_topics(app, conf)
    zombie = pinned_changelog(kafka_bootstrap, app.changelog_topic("counts"), unique)
    threading.Timer(2.0, zombie.abort_transaction).start()  # the open transaction times out
    backend = MemoryBackend(app.all_stores)
    with caplog.at_level(logging.WARNING, "runfacts.engine"):
        count, took = restore(app, conf, backend)
    assert backend.data["counts"] == {b"k0": b"v0", b"k1": b"v1", b"k2": b"v2"}
    assert backend.meta()[changelog_key("counts")] == b"4"
    assert count == 3
    assert took >= 1.5  # it waited for the transaction instead of stopping at the LSO
    assert any("waits for open transactions" in r.message and "readable up to" in r.message
               for r in caplog.records)


def test_store_ahead_of_a_pinned_lso_is_kept_not_wiped(
        kafka_bootstrap: str, unique: str, app, tmp_path: Path) -> None:
    conf = settings(kafka_bootstrap, tmp_path, "a")
    prepare_topics(app, conf)
    zombie = pinned_changelog(kafka_bootstrap, app.changelog_topic("counts"), unique)
    threading.Timer(2.0, zombie.abort_transaction).start()
    backend = RocksBackend(tmp_path / "p0", app.all_stores)  # the owner's store: through offset 4
    backend.write({"counts": {b"k0": b"v0", b"k1": b"v1", b"k2": b"v2"}},
                  {changelog_key("counts"): b"4"})
    try:
        count, _ = restore(app, conf, backend)
        assert dict(backend.scan("counts", b"", b"\xff")) == {b"k0": b"v0", b"k1": b"v1",
                                                               b"k2": b"v2"}
        assert backend.meta()[changelog_key("counts")] == b"4"
        assert count == 0
    finally:
        backend.close()


def test_changelog_shorter_than_the_store_is_refused_naming_topic_and_offsets(
        kafka_bootstrap: str, unique: str, app, tmp_path: Path) -> None:
    conf = settings(kafka_bootstrap, tmp_path, "a")
    prepare_topics(app, conf)
    topic = app.changelog_topic("counts")
    produce(kafka_bootstrap, topic, [(b"k0", b"v0"), (b"k1", b"v1")])  # offsets 0, 1: ends at 2
    backend = RocksBackend(tmp_path / "p0", app.all_stores)  # a store of a longer changelog
    backend.write({"counts": {b"k9": b"v9"}}, {changelog_key("counts"): b"57"})
    try:
        with pytest.raises(InfrastructureError) as raised:
            restore(app, conf, backend)
        message = str(raised.value)
        assert f"{topic}[0] up to offset 57" in message
        assert "ends at offset 2" in message
        assert str(tmp_path / "p0") in message and "not retryable" in message
        assert dict(backend.scan("counts", b"", b"\xff")) == {b"k9": b"v9"}  # not wiped
    finally:
        backend.close()


def test_engine_exits_with_one_line_when_the_changelog_is_shorter_than_the_store(
        kafka_bootstrap: str, unique: str, app, tmp_path: Path,
        caplog: pytest.LogCaptureFixture) -> None:
    from runfacts.processors.engine.worker import run
    conf = settings(kafka_bootstrap, tmp_path, "a")
    prepare_topics(app, conf)
    backend = RocksBackend(tmp_path / app.name / "0", app.all_stores)
    backend.write({"counts": {b"k9": b"v9"}}, {changelog_key("counts"): b"57"})
    backend.close()
    params = [f"name={app.name}", f"source={app.sources[0].topic}", f"output=rs-out-{unique}",
              f"dead_letter_topic={app.dead_letter_topic}", "idle_ms=3600000"]
    # Without the refusal the worker wipes the store and runs on: SIGTERM stops it (exit 0).
    stop = threading.Timer(60.0, os.kill, (os.getpid(), signal.SIGTERM))
    stop.start()
    try:
        with caplog.at_level(logging.ERROR):
            code = run("runfacts.dev.apps:counter_app", params, conf)
    finally:
        stop.cancel()
    assert code == 3
    assert any("up to offset 57" in r.getMessage() and "ends at offset 0" in r.getMessage()
               for r in caplog.records)


def test_lost_group_offsets_resume_from_the_store_without_new_facts(
        kafka_bootstrap: str, unique: str, app, tmp_path: Path) -> None:
    out = f"rs-out-{unique}"
    conf = settings(kafka_bootstrap, tmp_path, "a", commit_every=50, consume_batch=50)
    produce(kafka_bootstrap, app.sources[0].topic, keyed(300, keys=10))
    first = EngineThread(app, conf).start()
    first.wait_until(lambda: first.engine.stats.processed >= 300 and not first.engine._txn.open)
    first.stop()
    facts = len(outputs(kafka_bootstrap, out))
    assert facts == 300

    admin = AdminClient({"bootstrap.servers": kafka_bootstrap})  # an operator's reset to earliest
    reset = ConsumerGroupTopicPartitions(app.name, [TopicPartition(app.sources[0].topic, 0, 0)])
    for future in admin.alter_consumer_group_offsets([reset]).values():
        future.result(30)

    again = EngineThread(app, conf).start()
    again.wait_until(lambda: again.engine.partitions == [0])
    time.sleep(2.0)  # time enough to re-decide 300 records if it started from the reset offset
    again.stop()
    assert again.engine.stats.processed == 0
    assert len(outputs(kafka_bootstrap, out)) == facts
