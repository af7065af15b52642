"""The outbox's SQL, per dialect (SQLite, PostgreSQL): pure string building, no I/O.

Tables, for an outbox named `<base>` (default `runfacts_outbox`):
- `<base>`: one row per emitted record; `seq` orders rows; `status` 0 pending, 1 published.
- `<base>_parked`: runs stopped by a permanent publish error, from `seq` on (an operator unparks).
- `<base>_lease`: the `relay` row: the active relay's holder id, fencing token and expiry;
  the `identity` row: this outbox's relay id (random, written once by the first relay), which
  names its Kafka transactional id, so relays of two databases never fence each other.
- `<base>_archive`: published rows moved out by the `archive` retention mode.

PostgreSQL only: `<base>` also carries the headers a consumer reads as plain text columns
(HEADER_COLUMNS: command_type, event_type, schema_version, command_id, traceparent, tracestate;
NULL when the record has no such header), so change data capture (Debezium's outbox event
router, runfacts.connectors.debezium) can put them on the record as Kafka headers; the relay
publishes the `headers` column, which holds them all.

Statements are written with `%s` placeholders; `Sql.q` turns them into `?` for SQLite.
"""

from __future__ import annotations

import re
import zlib
from dataclasses import dataclass
from enum import Enum

from runfacts.schemas.errors import ConfigError

PENDING = 0
PUBLISHED = 1
LEASE_NAME = "relay"
IDENTITY_NAME = "identity"
_IDENT = re.compile(r"^[a-z_][a-z0-9_]{0,47}$")
_SQLITE_NOW = "((julianday('now') - 2440587.5) * 86400.0)"
_COLUMNS = "seq, event_id, run_id, topic, value, headers, created_at"
# (Kafka header, PostgreSQL column): the headers Debezium places on the record, in this order
HEADER_COLUMNS = (("commandType", "command_type"), ("eventType", "event_type"),
                  ("schemaVersion", "schema_version"), ("commandId", "command_id"),
                  ("traceparent", "traceparent"), ("tracestate", "tracestate"))


def header_values(headers: tuple[tuple[str, bytes], ...] | list[tuple[str, bytes]]) -> tuple[str | None, ...]:
    """The HEADER_COLUMNS values of a record's headers (UTF-8 text; None when absent)."""
    found = dict(headers)
    return tuple(None if found.get(name) is None else found[name].decode() for name, _ in HEADER_COLUMNS)


class Dialect(Enum):
    """The two databases an outbox lives in."""

    SQLITE = "sqlite"
    POSTGRES = "postgres"


def dialect_of(conn: object) -> Dialect:
    """The dialect of a DB-API connection (stdlib sqlite3 or psycopg 3)."""
    module = type(conn).__module__
    if module.startswith("sqlite3"):
        return Dialect.SQLITE
    if module.startswith("psycopg"):
        return Dialect.POSTGRES
    raise ConfigError("connection", type(conn).__name__, "expected sqlite3 or psycopg 3")


def check_table_name(name: str) -> str:
    """`name` if it is a safe lower-case SQL identifier, else a ConfigError naming it."""
    if not _IDENT.match(name):
        raise ConfigError("outbox table", name, "must match [a-z_][a-z0-9_]* (at most 48 chars)")
    return name


@dataclass(frozen=True)
class Sql:
    """All statements for one outbox table in one dialect."""

    dialect: Dialect
    base: str

    def __post_init__(self) -> None:
        check_table_name(self.base)

    @property
    def pg(self) -> bool:
        return self.dialect is Dialect.POSTGRES

    @property
    def now(self) -> str:
        return "clock_timestamp()" if self.pg else _SQLITE_NOW

    @property
    def channel(self) -> str:
        """The LISTEN/NOTIFY channel that wakes this outbox's relay."""
        return self.base

    @property
    def lock_class(self) -> int:
        """Advisory-lock class id of this outbox (a signed 32-bit hash of its name)."""
        return zlib.crc32(self.base.encode()) - 2**31

    def q(self, statement: str) -> str:
        """`statement` with placeholders in this dialect's style."""
        return statement if self.pg else statement.replace("%s", "?")

    def ago(self, seconds_param: str = "%s") -> str:
        """SQL for 'now minus N seconds', N bound to the placeholder."""
        if self.pg:
            return f"clock_timestamp() - make_interval(secs => {seconds_param})"
        return f"({_SQLITE_NOW} - {seconds_param})"

    def later(self, seconds_param: str = "%s") -> str:
        """SQL for 'now plus N seconds', N bound to the placeholder."""
        if self.pg:
            return f"clock_timestamp() + make_interval(secs => {seconds_param})"
        return f"({_SQLITE_NOW} + {seconds_param})"

    def ddl(self) -> list[str]:
        """CREATE statements (idempotent) for the outbox, parked, lease and archive tables."""
        b = self.base
        if self.pg:
            seq, blob, ts, ident = "bigint", "bytea", "timestamptz", "GENERATED ALWAYS AS IDENTITY"
            never = "'-infinity'"
        else:
            seq, blob, ts, ident, never = "INTEGER", "BLOB", "REAL", "", "0"
        key = f"{seq} {ident} PRIMARY KEY" if self.pg else "INTEGER PRIMARY KEY AUTOINCREMENT"
        row = (f"event_id text NOT NULL, run_id text NOT NULL, topic text NOT NULL, "
               f"value {blob} NOT NULL, headers text NOT NULL, "
               f"created_at {ts} NOT NULL DEFAULT ({self.now})")
        header_columns = "".join(f", {column} text" for _, column in HEADER_COLUMNS) if self.pg else ""
        return [
            f"CREATE TABLE IF NOT EXISTS {b} (seq {key}, {row}, "
            f"status smallint NOT NULL DEFAULT 0, published_at {ts}{header_columns})",
            f"CREATE UNIQUE INDEX IF NOT EXISTS {b}_event_id ON {b} (event_id)",
            f"CREATE INDEX IF NOT EXISTS {b}_pending ON {b} (seq) WHERE status = 0",
            f"CREATE INDEX IF NOT EXISTS {b}_published ON {b} (published_at) WHERE status = 1",
            f"CREATE TABLE IF NOT EXISTS {b}_parked (run_id text PRIMARY KEY, seq {seq} NOT NULL, "
            f"event_id text NOT NULL, error text NOT NULL, parked_at {ts} NOT NULL "
            f"DEFAULT ({self.now}))",
            f"CREATE TABLE IF NOT EXISTS {b}_lease (name text PRIMARY KEY, holder text NOT NULL, "
            f"token bigint NOT NULL, expires_at {ts} NOT NULL)",
            f"INSERT INTO {b}_lease VALUES ('{LEASE_NAME}', '', 0, {never}) ON CONFLICT DO NOTHING",
            f"CREATE TABLE IF NOT EXISTS {b}_archive (seq {seq} PRIMARY KEY, {row}, "
            f"published_at {ts})",
        ]

    def insert(self) -> str:
        """Insert one row: event_id, run_id, topic, value, headers (+ HEADER_COLUMNS on PostgreSQL)."""
        columns = ["event_id", "run_id", "topic", "value", "headers"]
        if self.pg:
            columns += [column for _, column in HEADER_COLUMNS]
        return self.q(f"INSERT INTO {self.base} ({', '.join(columns)}) "
                      f"VALUES ({', '.join(['%s'] * len(columns))}) ON CONFLICT (event_id) DO NOTHING")

    def header_columns_present(self) -> str:
        """PostgreSQL: the HEADER_COLUMNS the outbox table has (a table made before them has none)."""
        names = ", ".join(f"'{column}'" for _, column in HEADER_COLUMNS)
        return ("SELECT column_name FROM information_schema.columns WHERE table_schema = current_schema() "
                f"AND table_name = '{self.base}' AND column_name IN ({names})")

    def add_header_columns(self, missing: list[str]) -> str:
        """PostgreSQL: add the `missing` header columns (NULL in older rows)."""
        return f"ALTER TABLE {self.base} " + ", ".join(f"ADD COLUMN IF NOT EXISTS {c} text" for c in missing)

    def run_lock(self) -> str:
        """PostgreSQL: hold the run's advisory lock until commit, so seq order is commit order."""
        return f"SELECT pg_advisory_xact_lock({self.lock_class}, hashtext(%s))"

    def fetch_pending(self) -> str:
        b = self.base
        return self.q(
            f"SELECT {_COLUMNS} FROM {b} o WHERE status = {PENDING} AND NOT EXISTS "
            f"(SELECT 1 FROM {b}_parked p WHERE p.run_id = o.run_id AND p.seq <= o.seq) "
            "ORDER BY seq LIMIT %s")

    def mark(self, count: int) -> str:
        where = "seq = ANY(%s)" if self.pg else f"seq IN ({', '.join(['?'] * count)})"
        return self.q(f"UPDATE {self.base} SET status = {PUBLISHED}, published_at = {self.now} "
                      f"WHERE {where} AND status = {PENDING}")

    def park(self) -> str:
        return self.q(f"INSERT INTO {self.base}_parked (run_id, seq, event_id, error) "
                      "VALUES (%s, %s, %s, %s) ON CONFLICT (run_id) DO NOTHING")

    def unpark(self) -> str:
        return self.q(f"DELETE FROM {self.base}_parked WHERE run_id = %s")

    def parked(self) -> str:
        return f"SELECT run_id, seq, event_id, error FROM {self.base}_parked ORDER BY seq"

    def lease_token(self) -> str:
        lock = " FOR SHARE" if self.pg else ""
        return self.q(f"SELECT holder, token FROM {self.base}_lease WHERE name = '{LEASE_NAME}'"
                      + lock)

    def probe(self) -> str:
        """A read that fails when the outbox or its lease table is missing."""
        return (f"SELECT (SELECT count(*) FROM {self.base}_lease WHERE name = '{LEASE_NAME}'), "
                f"(SELECT count(*) FROM {self.base} WHERE seq = 0)")

    def identity_insert(self) -> str:
        """Record this outbox's relay id, unless one is recorded already (race-safe)."""
        never = "'-infinity'" if self.pg else "0"
        return self.q(f"INSERT INTO {self.base}_lease VALUES ('{IDENTITY_NAME}', %s, 0, {never}) "
                      "ON CONFLICT DO NOTHING")

    def identity(self) -> str:
        return f"SELECT holder FROM {self.base}_lease WHERE name = '{IDENTITY_NAME}'"

    def lease_acquire(self) -> str:
        return self.q(
            f"UPDATE {self.base}_lease SET holder = %s, token = token + 1, "
            f"expires_at = {self.later()} WHERE name = '{LEASE_NAME}' "
            f"AND expires_at < {self.now} RETURNING token")

    def lease_renew(self) -> str:
        return self.q(f"UPDATE {self.base}_lease SET expires_at = {self.later()} "
                      f"WHERE name = '{LEASE_NAME}' AND holder = %s AND token = %s")

    def lease_release(self) -> str:
        return self.q(f"UPDATE {self.base}_lease SET expires_at = {self.ago('1')} "
                      f"WHERE name = '{LEASE_NAME}' AND holder = %s AND token = %s")

    def lease_state(self) -> str:
        age = (f"extract(epoch from expires_at - {self.now})" if self.pg
               else f"expires_at - {self.now}")
        return f"SELECT holder, token, {age} FROM {self.base}_lease WHERE name = '{LEASE_NAME}'"

    def sweep(self, archive: bool) -> list[str]:
        """Statements removing published rows older than the bound cutoff (in seconds)."""
        b, cond = self.base, f"status = {PUBLISHED} AND published_at <= %s"
        cols = "seq, event_id, run_id, topic, value, headers, created_at, published_at"
        delete = f"DELETE FROM {b} WHERE {cond}"
        if not archive:
            return [self.q(delete)]
        if self.pg:
            return [f"WITH moved AS ({delete} RETURNING {cols}) "
                    f"INSERT INTO {b}_archive ({cols}) SELECT {cols} FROM moved"]
        return [self.q(f"INSERT INTO {b}_archive ({cols}) SELECT {cols} FROM {b} WHERE {cond}"),
                self.q(delete)]

    def capture_slot(self) -> str:
        """PostgreSQL: the replication slot %s (pgoutput, this database) and whether publication
        %s covers this outbox table: the proof that change data capture reads it."""
        return ("SELECT s.confirmed_flush_lsn, EXISTS (SELECT 1 FROM pg_publication_tables p "
                "WHERE p.pubname = %s AND p.schemaname = current_schema() "
                f"AND p.tablename = '{self.base}') FROM pg_replication_slots s "
                "WHERE s.slot_name = %s AND s.plugin = 'pgoutput' AND s.database = current_database()")

    def prune_captured(self) -> str:
        """PostgreSQL: delete up to %s rows created before the cutoff %s, published or not
        (Debezium decodes the WAL, not the table: a committed row's insert is already there)."""
        b = self.base
        return (f"DELETE FROM {b} WHERE seq IN (SELECT seq FROM {b} WHERE created_at <= %s "
                "ORDER BY seq LIMIT %s)")

    def cutoff(self) -> str:
        """The sweep cutoff 'now minus retention', computed once so every statement agrees."""
        return self.q(f"SELECT {self.ago()}")

    def metrics(self) -> str:
        age = (f"extract(epoch from {self.now} - min(created_at))" if self.pg
               else f"{self.now} - min(created_at)")
        b = self.base
        return (f"SELECT count(*), {age}, (SELECT count(*) FROM {b}_parked) "
                f"FROM {b} WHERE status = {PENDING}")
