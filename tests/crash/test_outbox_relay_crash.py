"""kill -9 of the relay (a real subprocess) at each crash point, then a restart.

Oracle: every outbox row reaches Kafka; a repeated eventId repeats the same bytes; per run,
first deliveries come in outbox order; a consumer with the inbox applies each event once.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections import Counter

import psycopg
import pytest
from outbox_support import (
    AvroEncoder,
    DemoEvent,
    consume,
    create_topic,
    decode,
    drop_outbox,
    duplicates_are_identical,
    per_run_first_seen,
)

from runfacts.connectors.outbox.inbox import Inbox
from runfacts.connectors.outbox.store import OutboxStore
from runfacts.connectors.outbox.writer import Outbox
from runfacts.crashpoints import arm

pytestmark = [pytest.mark.integration, pytest.mark.postgres, pytest.mark.crash]

EVENTS, RUNS, BATCH, TTL = 240, 6, 40, 3.0


def relay_process(dsn: str, bootstrap: str, table: str, log_path, env_extra: dict[str, str]):
    command = [sys.executable, "-m", "runfacts.cli", "outbox", "relay", "--db", dsn,
               "--bootstrap", bootstrap, "--table", table, "--batch-size", str(BATCH),
               "--lease-ttl", str(TTL), "--poll-interval", "0.2", "--exit-when-idle"]
    with open(log_path, "a", encoding="utf-8") as log:
        return subprocess.Popen(command, env={**os.environ, **env_extra}, stdout=log, stderr=log)


def fill_outbox(dsn: str, bootstrap: str, topic: str, table: str, unique: str) -> None:
    create_topic(bootstrap, topic)
    box = Outbox(AvroEncoder(topic), table=table)
    with psycopg.connect(dsn) as conn:
        box.install(conn)
        with box.transaction(conn) as tx:
            for i in range(EVENTS):
                tx.emit(DemoEvent(f"{unique}-{i}", f"run-{i % RUNS}", i // RUNS))


def apply_with_inbox(received: list, inbox: Inbox) -> Counter:
    """A consumer that dedupes by eventId: how often each event had an effect."""
    effects: Counter = Counter()
    for ts, record in enumerate(received):
        if not inbox.seen(record.event_id):
            effects[decode(record.value)["eventId"]] += 1
            inbox.mark(record.event_id, float(ts))
    return effects


@pytest.mark.parametrize("point, after, duplicates_expected", [
    ("relay.after_publish_before_mark", 2, True),
    ("relay.during_mark", 2, True),
    ("relay.holding_lease", 3, False),
])
def test_restart_publishes_every_row_once_per_event_id_when_relay_killed_at_point(
        point, after, duplicates_expected, postgres_dsn, kafka_bootstrap, unique, tmp_path):
    topic, table = f"test.outbox.crash.{unique}", f"ob_crash_{unique}"
    fill_outbox(postgres_dsn, kafka_bootstrap, topic, table, unique)
    log = tmp_path / "relay.log"

    doomed = relay_process(postgres_dsn, kafka_bootstrap, table, log, arm(point, after))
    assert doomed.wait(60) == -signal.SIGKILL, log.read_text()
    store = OutboxStore.open(postgres_dsn, table)
    holder, token, left = store.lease_state()
    assert token == 1 and holder.startswith("relay-") and left > 0  # the dead relay's lease
    assert 0 < store.metrics().pending < EVENTS

    started = time.monotonic()
    successor = relay_process(postgres_dsn, kafka_bootstrap, table, log, {})
    assert successor.wait(60) == 0, log.read_text()
    assert time.monotonic() - started >= left * 0.8  # it waited for the lease to expire
    assert store.lease_state()[1] == 2 and store.metrics().pending == 0
    store.close()

    received = consume(kafka_bootstrap, topic, EVENTS)
    assert len({r.event_id for r in received}) == EVENTS
    assert duplicates_are_identical(received)
    assert (len(received) > EVENTS) == duplicates_expected
    order = per_run_first_seen(received)
    assert all(ns == list(range(EVENTS // RUNS)) for ns in order.values()), order

    effects = apply_with_inbox(received, Inbox.open(str(tmp_path / "inbox.db")))
    assert len(effects) == EVENTS and set(effects.values()) == {1}
    drop_outbox(postgres_dsn, table)
