"""The outbox, relay side: fetch pending rows, fenced mark/park, the lease, retention, metrics.

Every write the relay makes is fenced: it runs in one DB transaction that first reads the
lease row (PostgreSQL: FOR SHARE, so a takeover waits for it) and refuses with `LeaseLost`
unless this relay's (holder, token) is still the one recorded there. A relay whose lease
expired and was taken over can therefore publish duplicates, but never mark or park rows.
"""

from __future__ import annotations

import re
import sqlite3
import uuid
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from runfacts.connectors.outbox.sql import Sql, dialect_of
from runfacts.crashpoints import crash_point
from runfacts.schemas.errors import ConfigError, InfrastructureError

SQLITE_CHUNK = 500
DEFAULT_TABLE = "runfacts_outbox"


class LeaseLost(InfrastructureError):
    """This relay no longer holds the outbox's lease (expired and taken over, or released)."""

    def __init__(self, table: str, token: int) -> None:
        super().__init__(f"outbox {table}: lease token {token} is no longer current",
                         retryable=True)


class OutboxNotInstalled(ConfigError):
    """The outbox's tables are missing from the database the relay was pointed at."""

    def __init__(self, db: str, table: str) -> None:
        fix = f"runfacts outbox install --db {shown_db(db)}"
        if table != DEFAULT_TABLE:
            fix += f" --table {table}"
        super().__init__("--db", shown_db(db), f"outbox {table} is not installed there; create it with `{fix}`")


def shown_db(db: str) -> str:
    """`db` fit for a message: a DSN's password masked."""
    return re.sub(r"(://[^:/@]+:)[^@]*@", r"\1***@", db)


def _is_missing_table(exc: BaseException) -> bool:
    if isinstance(exc, sqlite3.OperationalError):
        return "no such table" in str(exc)
    return type(exc).__name__ == "UndefinedTable"  # psycopg.errors.UndefinedTable


@dataclass(frozen=True)
class OutboxRow:
    """One pending outbox row, as the relay publishes it."""

    seq: int
    event_id: str
    run_id: str
    topic: str
    value: bytes
    headers: str
    created_at: Any


def _outbox_row(seq: int, event_id: str, run_id: str, topic: str, value: Any, headers: str,
                created_at: Any) -> OutboxRow:
    """An OutboxRow from a fetched row (PostgreSQL returns bytea as memoryview)."""
    return OutboxRow(seq, event_id, run_id, topic, bytes(value), headers, created_at)


@dataclass(frozen=True)
class Lease:
    """The right to publish an outbox: who holds it and its fencing token."""

    holder: str
    token: int


@dataclass(frozen=True)
class ParkedRun:
    """A run stopped at `seq` by a permanent publish error; an operator unparks it."""

    run_id: str
    seq: int
    event_id: str
    error: str


@dataclass(frozen=True)
class OutboxMetrics:
    """Backlog of one outbox, read from the database."""

    pending: int
    oldest_pending_age_s: float
    parked_runs: int


def is_postgres_dsn(db: str) -> bool:
    return db.startswith(("postgresql://", "postgres://"))


def connect(db: str) -> Any:
    """An autocommit connection: PostgreSQL for a postgresql:// DSN, else a SQLite file."""
    if is_postgres_dsn(db):
        import psycopg

        return psycopg.connect(db, autocommit=True)
    path = db.removeprefix("sqlite:///") if db.startswith("sqlite:///") else db
    conn = sqlite3.connect(path, isolation_level=None, timeout=30, check_same_thread=False)
    conn.execute("PRAGMA busy_timeout = 30000")
    return conn


class OutboxStore:
    """Relay-side operations on one outbox table over one autocommit connection."""

    def __init__(self, conn: Any, table: str, db: str = "") -> None:
        self.conn = conn
        self.db = db
        self.sql = Sql(dialect_of(conn), table)

    @classmethod
    def open(cls, db: str, table: str) -> OutboxStore:
        return cls(connect(db), table, db)

    def check_installed(self) -> None:
        """Raise OutboxNotInstalled (naming `runfacts outbox install`) when the tables are missing."""
        try:
            self.conn.execute(self.sql.probe()).fetchone()
        except Exception as exc:
            if _is_missing_table(exc):
                raise OutboxNotInstalled(self.db or "<db>", self.sql.base) from None
            raise

    def relay_id(self) -> str:
        """This outbox's relay id: random, recorded by the first relay, the same ever after.

        It survives restarts (so a restarted relay fences its predecessor at the broker) and
        differs between databases (so relays of two harness databases never fence each other).
        """
        self.check_installed()
        with self._tx() as conn:
            conn.execute(self.sql.identity_insert(), (uuid.uuid4().hex[:12],))
            return str(conn.execute(self.sql.identity()).fetchone()[0])

    def close(self) -> None:
        self.conn.close()

    @contextmanager
    def _tx(self) -> Iterator[Any]:
        if self.sql.pg:
            with self.conn.transaction():
                yield self.conn
            return
        self.conn.execute("BEGIN IMMEDIATE")
        try:
            yield self.conn
        except BaseException:
            self.conn.execute("ROLLBACK")
            raise
        self.conn.execute("COMMIT")

    def fetch_pending(self, limit: int) -> list[OutboxRow]:
        """Up to `limit` pending rows in seq order, skipping parked runs from their parked seq."""
        rows = self.conn.execute(self.sql.fetch_pending(), (limit,)).fetchall()
        return [_outbox_row(*row) for row in rows]

    def _fence(self, conn: Any, lease: Lease) -> None:
        row = conn.execute(self.sql.lease_token()).fetchone()
        if row is None or (row[0], int(row[1])) != (lease.holder, lease.token):
            raise LeaseLost(self.sql.base, lease.token)

    def mark_published(self, seqs: Sequence[int], lease: Lease) -> int:
        """Mark rows published in one fenced transaction; the number of rows changed."""
        changed = 0
        with self._tx() as conn:
            self._fence(conn, lease)
            if self.sql.pg:
                changed = conn.execute(self.sql.mark(len(seqs)), (list(seqs),)).rowcount
            else:
                for start in range(0, len(seqs), SQLITE_CHUNK):
                    chunk = list(seqs[start:start + SQLITE_CHUNK])
                    changed += conn.execute(self.sql.mark(len(chunk)), chunk).rowcount
            crash_point("relay.during_mark")
        return changed

    def park(self, row: OutboxRow, error: str, lease: Lease) -> None:
        """Stop `row`'s run from `row.seq` on (fenced); rows before it keep publishing."""
        with self._tx() as conn:
            self._fence(conn, lease)
            conn.execute(self.sql.park(), (row.run_id, row.seq, row.event_id, error))

    def unpark(self, run_id: str) -> bool:
        """Let a parked run publish again (after the operator fixed the cause)."""
        return self.conn.execute(self.sql.unpark(), (run_id,)).rowcount == 1

    def parked(self) -> list[ParkedRun]:
        return [ParkedRun(*row) for row in self.conn.execute(self.sql.parked()).fetchall()]

    def try_acquire(self, holder: str, ttl_s: float) -> Lease | None:
        """Take the lease if it has expired (bumping the fencing token); None if it is held."""
        with self._tx() as conn:
            row = conn.execute(self.sql.lease_acquire(), (holder, ttl_s)).fetchone()
        return None if row is None else Lease(holder, int(row[0]))

    def renew(self, lease: Lease, ttl_s: float) -> bool:
        """Extend the lease; False when it was taken over (the token moved on)."""
        params = (ttl_s, lease.holder, lease.token)
        return self.conn.execute(self.sql.lease_renew(), params).rowcount == 1

    def release(self, lease: Lease) -> None:
        """Expire the lease now so another relay can take over without waiting."""
        self.conn.execute(self.sql.lease_release(), (lease.holder, lease.token))

    def lease_state(self) -> tuple[str, int, float]:
        """(holder, token, seconds until expiry; negative when expired)."""
        holder, token, left = self.conn.execute(self.sql.lease_state()).fetchone()
        return holder, int(token), float(left)

    def sweep(self, retention_s: float, archive: bool) -> int:
        """Delete (or move to the archive table) rows published more than retention_s ago."""
        with self._tx() as conn:
            cutoff = conn.execute(self.sql.cutoff(), (retention_s,)).fetchone()[0]
            removed = 0
            for statement in self.sql.sweep(archive):
                removed = conn.execute(statement, (cutoff,)).rowcount
        return removed

    def prune_captured(self, slot: str, publication: str, older_than_s: float, chunk: int = 10_000) -> int:
        """Delete rows older than `older_than_s` from an outbox that Debezium publishes.

        Refuses (ConfigError naming the slot) unless the replication slot `slot` exists in
        this database and `publication` covers this table: without them nothing guarantees the
        rows were captured. Rows go in chunks of `chunk`, each its own transaction.
        """
        if not self.sql.pg:
            raise ConfigError("--db", shown_db(self.db), "Debezium reads PostgreSQL only; "
                              "a SQLite outbox is published by the relay (runfacts outbox relay --retention)")
        self.check_installed()
        found = self.conn.execute(self.sql.capture_slot(), (publication, slot)).fetchone()
        if found is None:
            raise ConfigError("--prefix", slot, f"no pgoutput replication slot {slot} in this database: "
                              "the Debezium connector makes it on its first start; prune after that")
        if not found[1]:
            raise ConfigError("--prefix", publication, f"publication {publication} does not cover "
                              f"{self.sql.base}: is the connector reading another table?")
        removed = 0
        with self._tx() as conn:
            cutoff = conn.execute(self.sql.cutoff(), (older_than_s,)).fetchone()[0]
        while True:
            with self._tx() as conn:
                deleted = conn.execute(self.sql.prune_captured(), (cutoff, chunk)).rowcount
            removed += deleted
            if deleted < chunk:
                return removed

    def metrics(self) -> OutboxMetrics:
        pending, age, parked = self.conn.execute(self.sql.metrics()).fetchone()
        return OutboxMetrics(int(pending), float(age or 0.0), int(parked))
