"""Relay-side store on SQLite: pending rows, fenced marks, lease takeover, parking, retention."""

from __future__ import annotations

import sqlite3

import pytest
from outbox_support import AvroEncoder, DemoEvent

from runfacts.connectors.outbox import Outbox
from runfacts.connectors.outbox.store import Lease, LeaseLost, OutboxNotInstalled, OutboxStore


@pytest.fixture
def path(tmp_path) -> str:
    return str(tmp_path / "service.db")


@pytest.fixture
def store(path) -> OutboxStore:
    box = Outbox(AvroEncoder("t"))
    conn = sqlite3.connect(path)
    box.install(conn)
    with box.transaction(conn) as tx:
        for i, run in enumerate(["a", "b", "a", "b", "a"]):
            tx.emit(DemoEvent(f"e{i}", run, i))
    return OutboxStore.open(path, "runfacts_outbox")


def expire(store: OutboxStore) -> None:
    store.conn.execute("UPDATE runfacts_outbox_lease SET expires_at = 0")


def test_fetch_pending_returns_rows_in_seq_order_when_nothing_published(store):
    assert [r.event_id for r in store.fetch_pending(10)] == ["e0", "e1", "e2", "e3", "e4"]
    assert [r.event_id for r in store.fetch_pending(2)] == ["e0", "e1"]


def test_mark_published_hides_rows_from_fetch_when_lease_is_current(store):
    lease = store.try_acquire("r1", 10)
    assert store.mark_published([1, 2], lease) == 2
    assert [r.event_id for r in store.fetch_pending(10)] == ["e2", "e3", "e4"]


def test_try_acquire_returns_none_when_lease_is_held_by_another_relay(store):
    assert store.try_acquire("r1", 10) == Lease("r1", 1)
    assert store.try_acquire("r2", 10) is None


def test_try_acquire_bumps_token_when_previous_lease_expired(store):
    store.try_acquire("r1", 10)
    expire(store)
    assert store.try_acquire("r2", 10) == Lease("r2", 2)


def test_mark_published_raises_lease_lost_when_token_was_superseded(store):
    stale = store.try_acquire("r1", 10)
    expire(store)
    store.try_acquire("r2", 10)
    with pytest.raises(LeaseLost, match="token 1"):
        store.mark_published([1], stale)
    assert len(store.fetch_pending(10)) == 5


def test_renew_fails_when_lease_was_taken_over(store):
    first = store.try_acquire("r1", 10)
    assert store.renew(first, 10)
    expire(store)
    store.try_acquire("r2", 10)
    assert not store.renew(first, 10)


def test_release_lets_another_relay_acquire_without_waiting(store):
    store.release(store.try_acquire("r1", 60))
    assert store.try_acquire("r2", 60) == Lease("r2", 2)


def test_park_skips_run_from_parked_seq_and_unpark_restores_it(store):
    lease = store.try_acquire("r1", 10)
    row = store.fetch_pending(10)[3]  # e3, run b
    store.park(row, "MSG_SIZE_TOO_LARGE: big", lease)
    assert [r.event_id for r in store.fetch_pending(10)] == ["e0", "e1", "e2", "e4"]
    assert [(p.run_id, p.seq, p.error) for p in store.parked()] == [
        ("b", 4, "MSG_SIZE_TOO_LARGE: big")]
    assert store.metrics().parked_runs == 1
    assert store.unpark("b")
    assert len(store.fetch_pending(10)) == 5


def test_sweep_deletes_published_rows_when_older_than_retention(store):
    lease = store.try_acquire("r1", 10)
    store.mark_published([1, 2], lease)
    assert store.sweep(retention_s=3600, archive=False) == 0
    assert store.sweep(retention_s=0, archive=False) == 2
    assert store.conn.execute("SELECT count(*) FROM runfacts_outbox").fetchone() == (3,)


def test_sweep_moves_rows_to_archive_when_archive_is_set(store):
    store.mark_published([1, 2, 3], store.try_acquire("r1", 10))
    assert store.sweep(retention_s=0, archive=True) == 3
    archived = store.conn.execute("SELECT event_id FROM runfacts_outbox_archive ORDER BY seq")
    assert [r[0] for r in archived] == ["e0", "e1", "e2"]


def test_metrics_report_pending_count_and_oldest_age_when_rows_wait(store):
    metrics = store.metrics()
    assert metrics.pending == 5
    assert 0 <= metrics.oldest_pending_age_s < 60


def test_not_installed_error_names_install_command_without_the_dsn_password():
    message = str(OutboxNotInstalled("postgresql://app:s3cret@db:5432/harness", "jobs_outbox"))
    assert "runfacts outbox install --db postgresql://app:***@db:5432/harness --table jobs_outbox" in message
    assert "s3cret" not in message


def test_check_installed_raises_not_installed_when_sqlite_tables_are_missing(tmp_path):
    store = OutboxStore.open(str(tmp_path / "empty.db"), "runfacts_outbox")
    with pytest.raises(OutboxNotInstalled, match="runfacts outbox install --db"):
        store.check_installed()
    store.close()
