"""The contract suite an outbox store dialect is held to: `OutboxStoreContract`.

An outbox dialect is the SQL (`runfacts.connectors.outbox.sql.Sql`) and the DB-API connection
that the writer (`Outbox`: what a service calls inside its own transaction) and the relay
(`OutboxStore`: fetch, fenced mark and park, lease, retention) run on. SQLite and PostgreSQL
ship; the relay's promise, every committed record published at least once, in commit order
per run, never one the service rolled back (docs/decisions/0007-outbox.md), rests on eight
rules the dialect keeps:

1. Atomic with the business row: a record commits with the service's own write or not at all,
   and the relay sees neither until the commit.
2. One row per eventId: emitting an eventId again stores nothing (`emit` answers False).
3. Exact: the relay reads back the topic, key (runId), value bytes and headers (with eventId)
   as emitted.
4. In order: pending rows come in seq order, at most `limit` of them; within a run seq order is
   commit order, even when two connections write the same run at once.
5. Relayed once: a marked row is never fetched again; an unmarked one (a relay that died
   between the Kafka commit and the mark) comes back, in the same order, with the same eventId.
6. Fenced: a relay whose lease was taken over cannot mark or park (`LeaseLost`), and nothing
   changes.
7. One lease holder: a held lease is not taken; an expired or released one is, with a higher
   token; the old holder's renew fails.
8. Parking stops one run: a parked run's rows from the parked seq on wait, its earlier rows and
   other runs flow; unparked, they come in order. Retention removes only published rows.

Subclass it in your tests (pytest collects the inherited `test_*` methods):

    class TestMyOutbox(OutboxStoreContract):
        def connect(self):      # a new autocommit connection to the same database, usable from a thread
            return psycopg.connect(DSN, autocommit=True)
            # SQLite: sqlite3.connect(path, isolation_level=None, timeout=30, check_same_thread=False)

Override `sql(conn, table)` to hold your own `Sql` subclass to the rules. Each test works on
tables of its own (`table`) and drops them at the end. Shell: it runs against your database.
"""

from __future__ import annotations

import contextlib
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from runfacts.connectors.outbox.sql import Sql, dialect_of
from runfacts.connectors.outbox.store import LeaseLost, OutboxRow, OutboxStore
from runfacts.connectors.outbox.writer import EncodedRecord, Outbox, decode_headers

TOPIC = "runfacts.contract.events"


class _AsIs:
    """The contract's encoder: its events are already records."""

    def encode(self, event: Any) -> EncodedRecord:
        return event


@dataclass(frozen=True)
class _DialectOutbox(Outbox):
    """An `Outbox` whose statements come from the dialect under test."""

    statements: Callable[[Any, str], Sql] | None = None

    def sql(self, conn: Any) -> Sql:
        return super().sql(conn) if self.statements is None else self.statements(conn, self.table)


class OutboxStoreContract:
    """Rules 1-8 of the module docstring, for the dialect `connect` and `sql` give."""

    table_prefix = "contract_outbox"
    lease_ttl_s = 30.0

    def connect(self) -> Any:
        """A new autocommit DB-API connection to the database under test (override it)."""
        raise NotImplementedError("OutboxStoreContract.connect: return a new connection to your database")

    def sql(self, conn: Any, table: str) -> Sql:
        """The dialect's statements for `table` (default: the packaged dialect of `conn`)."""
        return Sql(dialect_of(conn), table)

    # -- the fixture: fresh tables per test, dropped after it

    def setup_method(self, method: Any = None) -> None:
        self.table = f"{self.table_prefix}_{uuid.uuid4().hex[:10]}"
        self._conns: list[Any] = []
        self.writer = self.new_connection()
        self.outbox = _DialectOutbox(_AsIs(), self.table, statements=self.sql)  # type: ignore[arg-type]
        self.outbox.install(self.writer)
        self.writer.execute(f"CREATE TABLE {self.table}_orders (id text PRIMARY KEY)")
        self.store = self.new_store()

    def teardown_method(self, method: Any = None) -> None:
        for conn in self._conns:
            with contextlib.suppress(Exception):  # closing anyway
                conn.rollback()
        cleanup = self.connect()
        for suffix in ("", "_parked", "_lease", "_archive", "_orders"):
            cleanup.execute(f"DROP TABLE IF EXISTS {self.table}{suffix}")
        cleanup.close()
        for conn in self._conns:
            conn.close()

    def new_connection(self) -> Any:
        conn = self.connect()
        self._conns.append(conn)
        return conn

    def new_store(self) -> OutboxStore:
        store = OutboxStore(self.new_connection(), self.table)
        store.sql = self.sql(store.conn, self.table)
        return store

    # -- helpers

    def record(self, event_id: str, run_id: str = "run-1", value: bytes | None = None) -> EncodedRecord:
        return EncodedRecord(TOPIC, run_id, value if value is not None else f"v-{event_id}".encode(), event_id,
                             (("eventType", b"contract.happened"), ("schemaVersion", b"1")))

    def emit(self, *records: EncodedRecord, conn: Any = None) -> list[bool]:
        conn = self.writer if conn is None else conn
        with self.outbox.transaction(conn) as tx:
            return [tx.emit_record(r) for r in records]

    def pending(self, limit: int = 100) -> list[OutboxRow]:
        return self.store.fetch_pending(limit)

    def ids(self, limit: int = 100) -> list[str]:
        return [row.event_id for row in self.pending(limit)]

    def orders(self, conn: Any) -> list[str]:
        return [row[0] for row in conn.execute(f"SELECT id FROM {self.table}_orders ORDER BY id").fetchall()]

    def count(self, conn: Any) -> int:
        return int(conn.execute(f"SELECT count(*) FROM {self.table}").fetchone()[0])

    # -- the rules

    def test_a_record_commits_with_the_business_row_and_is_hidden_until_then(self) -> None:
        reader = self.new_connection()
        with self.outbox.transaction(self.writer) as tx:
            self.writer.execute(self.outbox.sql(self.writer).q(f"INSERT INTO {self.table}_orders VALUES (%s)"),
                                ("order-1",))
            tx.emit_record(self.record("e1"))
            assert self.ids() == [], "rule 1: the relay saw a record before its transaction committed"
            assert self.orders(reader) == [], "rule 1: the business row was visible before the commit"
        assert self.ids() == ["e1"], "rule 1: a committed record is not pending"
        assert self.orders(reader) == ["order-1"]

    def test_a_rolled_back_transaction_leaves_neither_row(self) -> None:
        class Refused(Exception):
            pass

        try:
            with self.outbox.transaction(self.writer) as tx:
                self.writer.execute(self.outbox.sql(self.writer).q(f"INSERT INTO {self.table}_orders VALUES (%s)"),
                                    ("order-2",))
                tx.emit_record(self.record("e2"))
                raise Refused
        except Refused:
            pass
        assert self.ids() == [], "rule 1: a rolled-back record reached the relay"
        assert self.orders(self.new_connection()) == [], "rule 1: the business row survived the rollback"
        assert self.count(self.writer) == 0

    def test_an_event_id_is_stored_once(self) -> None:
        assert self.emit(self.record("e3")) == [True]
        assert self.emit(self.record("e3", value=b"other")) == [False], "rule 2: a repeated eventId was stored"
        assert [(r.event_id, r.value) for r in self.pending()] == [("e3", b"v-e3")], "rule 2"

    def test_the_relay_reads_back_what_was_emitted(self) -> None:
        value = bytes(range(256)) + b"\x00\xc3\x01"
        self.emit(self.record("e4", run_id="run-ex", value=value))
        (row,) = self.pending()
        assert (row.topic, row.run_id, row.value) == (TOPIC, "run-ex", value), f"rule 3: read back {row!r}"
        assert dict(decode_headers(row.headers)) == {"eventType": b"contract.happened", "schemaVersion": b"1",
                                                     "eventId": b"e4"}, "rule 3: headers changed"

    def test_pending_rows_come_in_seq_order_up_to_the_limit(self) -> None:
        self.emit(self.record("a1", "run-a"), self.record("b1", "run-b"), self.record("a2", "run-a"))
        self.emit(self.record("b2", "run-b"), self.record("a3", "run-a"))
        assert self.ids() == ["a1", "b1", "a2", "b2", "a3"], "rule 4: rows out of seq order"
        assert self.ids(2) == ["a1", "b1"], "rule 4: the limit was not kept"
        seqs = [row.seq for row in self.pending()]
        assert seqs == sorted(seqs) and len(set(seqs)) == len(seqs)

    def test_within_a_run_seq_order_is_commit_order_when_two_connections_write_it(self) -> None:
        other = self.new_connection()
        committed: list[str] = []
        started = threading.Event()

        def second() -> None:
            started.set()
            self.emit(self.record("late", "run-c"), conn=other)
            committed.append("late")

        with self.outbox.transaction(self.writer) as tx:
            tx.emit_record(self.record("early", "run-c"))
            thread = threading.Thread(target=second, daemon=True)
            thread.start()
            started.wait(5)
            thread.join(1.0)  # a dialect that lets it commit now commits it first
        committed.append("early")
        thread.join(60)
        assert not thread.is_alive(), "the second writer never committed"
        assert self.ids() == committed, (f"rule 4: pending order {self.ids()} is not commit order {committed}: "
                                         "the run's second writer must wait for the first (PostgreSQL: the run lock)")

    def test_a_marked_row_is_never_fetched_again_and_an_unmarked_one_comes_back(self) -> None:
        self.emit(*(self.record(f"m{i}", f"run-{i % 2}") for i in range(4)))
        lease = self.store.try_acquire("relay-1", self.lease_ttl_s)
        assert lease is not None
        first = self.pending(2)
        assert self.store.mark_published([r.seq for r in first], lease) == 2
        assert self.store.mark_published([r.seq for r in first], lease) == 0, "rule 5: a row was marked twice"
        batch = self.pending(2)
        again = self.new_store().fetch_pending(2)  # the relay died before the mark: a new one fetches
        assert [r.event_id for r in batch] == ["m2", "m3"], "rule 5: a marked row came back"
        assert [(r.seq, r.event_id) for r in again] == [(r.seq, r.event_id) for r in batch], \
            "rule 5: an unmarked batch must come back the same, in the same order"

    def test_a_relay_whose_lease_was_taken_over_cannot_mark_or_park(self) -> None:
        self.emit(self.record("f1", "run-f"), self.record("f2", "run-g"))
        stale = self.store.try_acquire("relay-1", self.lease_ttl_s)
        assert stale is not None
        self.store.release(stale)
        successor = self.new_store()
        current = successor.try_acquire("relay-2", self.lease_ttl_s)
        assert current is not None and current.token > stale.token, "rule 7: a released lease was not taken"
        rows = self.pending()
        for attempt in (lambda: self.store.mark_published([rows[0].seq], stale),
                        lambda: self.store.park(rows[1], "stale relay", stale)):
            try:
                attempt()
            except LeaseLost:
                pass
            else:
                raise AssertionError("rule 6: a relay that lost its lease marked or parked")
        assert self.ids() == ["f1", "f2"] and self.store.parked() == [], "rule 6: a fenced write changed rows"
        assert successor.mark_published([rows[0].seq], current) == 1

    def test_one_relay_holds_the_lease_until_it_expires(self) -> None:
        first = self.store.try_acquire("relay-1", 0.3)
        assert first is not None
        other = self.new_store()
        assert other.try_acquire("relay-2", self.lease_ttl_s) is None, "rule 7: a held lease was taken"
        assert self.store.renew(first, 0.3), "rule 7: the holder could not renew"
        time.sleep(0.6)
        taken = other.try_acquire("relay-2", self.lease_ttl_s)
        assert taken is not None and taken.token > first.token, "rule 7: an expired lease was not taken over"
        assert not self.store.renew(first, self.lease_ttl_s), "rule 7: the old holder renewed a lease it lost"

    def test_a_parked_run_waits_while_others_flow_and_resumes_in_order(self) -> None:
        self.emit(self.record("p1", "run-p"), self.record("q1", "run-q"), self.record("p2", "run-p"),
                  self.record("q2", "run-q"), self.record("p3", "run-p"))
        lease = self.store.try_acquire("relay-1", self.lease_ttl_s)
        assert lease is not None
        p2 = next(r for r in self.pending() if r.event_id == "p2")
        self.store.park(p2, "topic missing", lease)
        assert self.ids() == ["p1", "q1", "q2"], "rule 8: a parked run's later rows, or other runs, are wrong"
        assert [(p.run_id, p.event_id) for p in self.store.parked()] == [("run-p", "p2")]
        assert self.store.unpark("run-p")
        assert self.ids() == ["p1", "q1", "p2", "q2", "p3"], "rule 8: an unparked run did not resume in order"

    def test_retention_removes_published_rows_only(self) -> None:
        self.emit(self.record("r1"), self.record("r2"), self.record("r3"))
        lease = self.store.try_acquire("relay-1", self.lease_ttl_s)
        assert lease is not None
        self.store.mark_published([self.pending()[0].seq], lease)
        time.sleep(0.05)
        self.store.sweep(0.0, archive=False)
        assert self.ids() == ["r2", "r3"], "rule 8: retention removed a pending row"
        assert self.count(self.writer) == 2, "rule 8: a published row outlived its retention"


__all__ = ["OutboxStoreContract"]
