"""The outbox on SQLite (the embedded default) with the real broker: polling relay, order."""

from __future__ import annotations

import sqlite3
import threading

import pytest
from outbox_support import (
    AvroEncoder,
    DemoEvent,
    consume,
    create_topic,
    duplicates_are_identical,
    per_run_first_seen,
)

from runfacts.connectors.outbox.store import OutboxStore
from runfacts.connectors.outbox.writer import Outbox
from runfacts.connectors.relay.loop import Relay, RelaySettings

pytestmark = pytest.mark.integration


def test_relay_publishes_each_run_in_order_when_sqlite_writer_runs_alongside(
        tmp_path, kafka_bootstrap, unique):
    topic, path = f"test.outbox.sqlite.{unique}", str(tmp_path / "service.db")
    create_topic(kafka_bootstrap, topic)
    box = Outbox(AvroEncoder(topic))
    box.install(sqlite3.connect(path))
    settings = RelaySettings(db=path, bootstrap=kafka_bootstrap, batch_size=40,
                             poll_interval_s=0.05, lease_ttl_s=3.0)
    relay = Relay(settings)
    relay_thread = threading.Thread(target=relay.run, daemon=True)
    relay_thread.start()

    conn = sqlite3.connect(path, timeout=30)
    for i in range(300):
        with box.transaction(conn) as tx:
            tx.emit(DemoEvent(f"e{i}", f"run-{i % 7}", i // 7))
    received = consume(kafka_bootstrap, topic, 300)
    relay.stop()
    relay_thread.join(10)

    order = per_run_first_seen(received)
    assert sum(len(ns) for ns in order.values()) == 300
    assert all(ns == list(range(len(ns))) for ns in order.values())
    assert duplicates_are_identical(received)
    store = OutboxStore.open(path, "runfacts_outbox")
    assert store.metrics().pending == 0
    assert store.lease_state()[2] < 0  # released on stop
    store.close()


def test_relay_exits_when_idle_and_nothing_is_pending_on_sqlite(tmp_path, kafka_bootstrap):
    path = str(tmp_path / "empty.db")
    Outbox(AvroEncoder("unused")).install(sqlite3.connect(path))
    relay = Relay(RelaySettings(db=path, bootstrap=kafka_bootstrap, exit_when_idle=True))
    relay.run()
    assert relay.lease is None and relay.idle and relay.published_total == 0
