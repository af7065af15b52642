"""The outbox on real PostgreSQL and the real broker: order, parking, lease, NOTIFY, retention."""

from __future__ import annotations

import random
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass

import psycopg
import pytest
from outbox_support import (
    AvroEncoder,
    DemoEvent,
    consume,
    create_topic,
    drop_outbox,
    duplicates_are_identical,
    per_run_first_seen,
)

from runfacts.connectors.outbox.store import LeaseLost, OutboxStore
from runfacts.connectors.outbox.writer import EncodedRecord, Outbox
from runfacts.connectors.relay.loop import Relay, RelaySettings
from runfacts.connectors.relay.publisher import KafkaPublisher, PublisherSettings
from runfacts.schemas.errors import InfrastructureError

pytestmark = [pytest.mark.integration, pytest.mark.postgres]


@dataclass(frozen=True)
class Env:
    dsn: str
    bootstrap: str
    topic: str
    table: str

    def outbox(self, topic: str = "") -> Outbox:
        return Outbox(AvroEncoder(topic or self.topic), table=self.table)

    def settings(self, **overrides) -> RelaySettings:
        base = dict(db=self.dsn, bootstrap=self.bootstrap, table=self.table, lease_ttl_s=3.0,
                    poll_interval_s=0.2, exit_when_idle=True)
        return RelaySettings(**(base | overrides))

    def connect(self) -> psycopg.Connection:
        return psycopg.connect(self.dsn)


@pytest.fixture
def env(postgres_dsn, kafka_bootstrap, unique) -> Iterator[Env]:
    topic, table = f"test.outbox.{unique}", f"ob_{unique}"
    create_topic(kafka_bootstrap, topic)
    env = Env(postgres_dsn, kafka_bootstrap, topic, table)
    with env.connect() as conn:
        env.outbox().install(conn)
    yield env
    drop_outbox(postgres_dsn, table, f"runs_{unique}", f"biz_{unique}")


def emit_all(env: Env, events: list[DemoEvent], outbox: Outbox | None = None) -> None:
    box = outbox or env.outbox()
    with env.connect() as conn, box.transaction(conn) as tx:
        for event in events:
            tx.emit(event)


def in_thread(relay: Relay) -> threading.Thread:
    thread = threading.Thread(target=relay.run, daemon=True)
    thread.start()
    return thread


def versioned_writer(env: Env, runs: list[str], runs_table: str, seed: int) -> None:
    """Bumps a random run's version (row lock = commit order) and emits it, 100 times."""
    pick, box = random.Random(seed), env.outbox()
    with env.connect() as conn:
        for _ in range(100):
            run = pick.choice(runs)
            with box.transaction(conn) as tx:
                (version,) = conn.execute(f"UPDATE {runs_table} SET version = version + 1 "
                                          "WHERE run_id = %s RETURNING version",
                                          (run,)).fetchone()
                tx.emit(DemoEvent(uuid.uuid4().hex, run, version))


def test_relay_publishes_each_run_in_commit_order_when_writers_are_concurrent(env, unique):
    runs, runs_table = [f"run-{unique}-{i}" for i in range(8)], f"runs_{unique}"
    with env.connect() as conn:
        conn.execute(f"CREATE TABLE {runs_table} (run_id text PRIMARY KEY, version int)")
        conn.cursor().executemany(f"INSERT INTO {runs_table} VALUES (%s, 0)",
                                  [(r,) for r in runs])
        conn.commit()
    relay = Relay(env.settings(batch_size=50, exit_when_idle=False, archive=True))
    relay_thread = in_thread(relay)
    writers = [threading.Thread(target=versioned_writer, args=(env, runs, runs_table, seed))
               for seed in range(4)]
    for thread in writers:
        thread.start()
    for thread in writers:
        thread.join()
    deadline = time.monotonic() + 90  # a loaded machine (the full suite) can take a while
    while relay.metrics().published_total < 400 and time.monotonic() < deadline:
        time.sleep(0.1)
    relay.stop()
    relay_thread.join(10)
    received = consume(env.bootstrap, env.topic, 400)
    order = per_run_first_seen(received)
    assert sum(len(ns) for ns in order.values()) == 400
    assert all(ns == list(range(1, len(ns) + 1)) for ns in order.values()), order
    assert duplicates_are_identical(received)


def test_emit_waits_for_open_transaction_of_same_run_when_on_postgres(env):
    box = env.outbox()
    with env.connect() as first, env.connect() as second:
        with box.transaction(first) as tx:
            tx.emit(DemoEvent("a", "run-x", 1))
            second.execute("SET lock_timeout = '200ms'")
            second.commit()
            with pytest.raises(psycopg.errors.LockNotAvailable), box.transaction(second) as other:
                other.emit(DemoEvent("b", "run-x", 2))
            with box.transaction(second) as other:
                other.emit(DemoEvent("c", "run-y", 1))
        seqs = first.execute(f"SELECT event_id FROM {env.table} ORDER BY seq").fetchall()
    assert [s[0] for s in seqs] == ["a", "c"]  # b waited for run-x; c (run-y) did not


def test_emit_rolls_back_business_write_when_event_invalid_on_postgres(env, unique):
    with env.connect() as conn:
        conn.execute(f"CREATE TABLE biz_{unique} (id int)")
        conn.commit()
        with pytest.raises(Exception, match="failed to encode"), \
                env.outbox().transaction(conn) as tx:
            conn.execute(f"INSERT INTO biz_{unique} VALUES (1)")
            tx.emit(DemoEvent("e1", "run-1", "NaN"))  # type: ignore[arg-type]
        counts = conn.execute(f"SELECT (SELECT count(*) FROM biz_{unique}), "
                              f"(SELECT count(*) FROM {env.table})").fetchone()
    assert counts == (0, 0)


def test_relay_parks_only_the_run_with_a_missing_topic_when_topic_does_not_exist(env, unique):
    missing = f"test.outbox.missing.{unique}"
    emit_all(env, [DemoEvent("a1", "A", 1), DemoEvent("b1", "B", 1)])
    emit_all(env, [DemoEvent("b2", "B", 2)], env.outbox(missing))
    emit_all(env, [DemoEvent("b3", "B", 3), DemoEvent("a2", "A", 2)])
    Relay(env.settings(missing_topic_grace_s=1.0)).run()  # held for the grace, then parked
    store = OutboxStore.open(env.dsn, env.table)
    assert [(p.run_id, p.event_id) for p in store.parked()] == [("B", "b2")]
    assert [r.event_id for r in store.fetch_pending(10)] == []
    got = consume(env.bootstrap, env.topic, 3)
    assert sorted(r.event_id for r in got) == ["a1", "a2", "b1"]
    create_topic(env.bootstrap, missing)
    assert store.unpark("B")
    Relay(env.settings()).run()
    assert store.metrics().pending == 0
    assert [r.event_id for r in consume(env.bootstrap, missing, 1)] == ["b2"]
    order = per_run_first_seen(consume(env.bootstrap, env.topic, 4, group=f"g2-{unique}"))
    assert order == {"A": [1, 2], "B": [1, 3]}
    store.close()


def test_relay_holds_rows_to_a_topic_made_after_they_were_written_and_publishes_them_when_it_appears(env, unique):
    late = f"test.outbox.late.{unique}"
    emit_all(env, [DemoEvent("a1", "A", 1)])
    emit_all(env, [DemoEvent("b1", "B", 1)], env.outbox(late))
    emit_all(env, [DemoEvent("b2", "B", 2), DemoEvent("a2", "A", 2)])
    relay = Relay(env.settings(missing_topic_grace_s=60.0, exit_when_idle=False))
    thread = in_thread(relay)
    assert sorted(r.event_id for r in consume(env.bootstrap, env.topic, 2)) == ["a1", "a2"]  # A goes on
    create_topic(env.bootstrap, late)  # B's rows wait for it instead of being parked
    deadline = time.monotonic() + 60
    while relay.metrics().published_total < 4 and time.monotonic() < deadline:
        time.sleep(0.1)
    relay.stop()
    thread.join(10)
    store = OutboxStore.open(env.dsn, env.table)
    assert store.parked() == [] and store.metrics().pending == 0
    assert [r.event_id for r in consume(env.bootstrap, late, 1)] == ["b1"]
    # A went on while B waited: b2 after b1 (on the late topic), after A's rows
    assert [r.event_id for r in consume(env.bootstrap, env.topic, 3, group=f"g2-{unique}")] == ["a1", "a2", "b2"]
    store.close()


def test_relay_parks_only_the_run_with_an_oversized_record_when_record_too_large(env):
    emit_all(env, [DemoEvent("a1", "A", 1)])
    with env.connect() as conn, env.outbox().transaction(conn) as tx:
        tx.emit_record(EncodedRecord(env.topic, "B", b"x" * 2_000_000, "b-big"))
        tx.emit(DemoEvent("a2", "A", 2))
    Relay(env.settings()).run()
    store = OutboxStore.open(env.dsn, env.table)
    [parked] = store.parked()
    assert (parked.run_id, parked.event_id) == ("B", "b-big")
    assert "MSG_SIZE_TOO_LARGE" in parked.error
    assert sorted(r.event_id for r in consume(env.bootstrap, env.topic, 2)) == ["a1", "a2"]
    store.close()


def test_stale_relay_mark_is_refused_when_lease_was_taken_over(env):
    emit_all(env, [DemoEvent("e1", "A", 1)])
    first, second = OutboxStore.open(env.dsn, env.table), OutboxStore.open(env.dsn, env.table)
    stale = first.try_acquire("relay-a", 0.2)
    assert second.try_acquire("relay-b", 10) is None
    time.sleep(0.3)
    fresh = second.try_acquire("relay-b", 10)
    assert fresh is not None and fresh.token == stale.token + 1
    with pytest.raises(LeaseLost):
        first.mark_published([1], stale)
    assert not first.renew(stale, 10)
    assert second.mark_published([1], fresh) == 1
    first.close()
    second.close()


def test_stale_producer_is_fenced_at_the_broker_when_a_successor_initialises(env, unique):
    emit_all(env, [DemoEvent("e1", "A", 1)])
    store = OutboxStore.open(env.dsn, env.table)
    rows = store.fetch_pending(10)
    settings = PublisherSettings(env.bootstrap, f"fence-{unique}", timeout_s=10)
    stale = KafkaPublisher(settings)
    successor = KafkaPublisher(settings)
    with pytest.raises(InfrastructureError, match="(?i)fenc"):
        stale.publish(rows)
    assert successor.publish(rows) == []
    store.close()


def test_second_relay_waits_then_takes_over_when_first_stops(env):
    first = Relay(env.settings(exit_when_idle=False))
    first_thread = in_thread(first)
    second = Relay(env.settings(exit_when_idle=False))
    second_thread = in_thread(second)
    time.sleep(1.0)
    assert (first.lease is None) != (second.lease is None)
    holder, waiter = (first, second) if first.lease else (second, first)
    token = holder.lease.token
    holder.stop()
    deadline = time.monotonic() + 5
    while waiter.lease is None and time.monotonic() < deadline:
        time.sleep(0.05)
    assert waiter.lease is not None and waiter.lease.token == token + 1
    waiter.stop()
    first_thread.join(5)
    second_thread.join(5)


def test_relay_wakes_on_notify_when_poll_interval_is_long(env):
    relay = Relay(env.settings(exit_when_idle=False, poll_interval_s=30.0, lease_ttl_s=90.0))
    thread = in_thread(relay)
    time.sleep(1.5)
    started = time.monotonic()
    emit_all(env, [DemoEvent("e1", "A", 1)])
    while relay.metrics().published_total < 1 and time.monotonic() - started < 10:
        time.sleep(0.01)
    elapsed = time.monotonic() - started
    relay.stop()
    thread.join(35)
    assert elapsed < 1.0


def test_relay_archives_published_rows_and_reports_metrics_when_retention_archives(env):
    emit_all(env, [DemoEvent(f"e{i}", f"run-{i % 3}", i // 3) for i in range(30)])
    relay = Relay(env.settings(archive=True))
    before = relay.metrics()
    relay.run()
    store = OutboxStore.open(env.dsn, env.table)
    archived = store.conn.execute(f"SELECT count(*) FROM {env.table}_archive").fetchone()[0]
    remaining = store.conn.execute(f"SELECT count(*) FROM {env.table}").fetchone()[0]
    assert (before.outbox.pending, archived, remaining) == (30, 30, 0)
    assert relay.published_total == 30 and store.metrics().pending == 0
    store.close()


def test_relay_backs_off_and_keeps_rows_pending_when_kafka_is_unreachable(env):
    emit_all(env, [DemoEvent("e1", "A", 1)])
    relay = Relay(env.settings(bootstrap="127.0.0.1:1", exit_when_idle=False,
                               kafka_timeout_s=0.3, backoff_base_s=0.05, backoff_cap_s=0.2))
    thread = in_thread(relay)
    deadline = time.monotonic() + 10
    while relay.consecutive_failures < 3 and time.monotonic() < deadline:
        time.sleep(0.05)
    store = OutboxStore.open(env.dsn, env.table)
    metrics = store.metrics()
    relay.stop()
    thread.join(10)
    assert relay.consecutive_failures >= 3 and thread.is_alive() is False
    assert (metrics.pending, metrics.parked_runs) == (1, 0)
    store.close()
