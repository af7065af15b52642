"""The transactional outbox, library side: what a service calls.

    outbox = Outbox(encoder)                 # encoder: the seam to the Avro codec
    outbox.install(conn)                     # once: CREATE TABLE IF NOT EXISTS ...
    with outbox.transaction(conn) as tx:     # sqlite3 or psycopg 3 connection
        conn.execute("UPDATE orders ...")    # business writes
        tx.emit(event)                       # same transaction: both commit or neither

`emit` encodes and validates the event *inside* the caller's transaction: an event the
encoder rejects raises `InvalidInput` naming the event, the `with` block rolls back, and
nothing reaches the relay. Invariants the relay relies on:
1. A row is visible to the relay only once the business transaction commits.
2. Within a run, `seq` order is commit order: SQLite serialises writers; PostgreSQL takes
   the run's advisory lock (held until commit) before the row gets its `seq`.
3. PostgreSQL: the commit sends NOTIFY on the outbox's channel, waking the relay.
4. PostgreSQL: the headers a consumer reads are also plain columns (sql.HEADER_COLUMNS), for
   change data capture (Debezium) as an alternative to the relay.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

from runfacts.connectors.outbox.sql import HEADER_COLUMNS, Dialect, Sql, dialect_of, header_values
from runfacts.schemas.errors import InvalidInput

COMMANDS_TOPIC = "runfacts.run.commands"
EVENT_ID_HEADER = "eventId"


@dataclass(frozen=True)
class EncodedRecord:
    """One Kafka record ready to publish: key is the runId; the value carries the eventId too."""

    topic: str
    key: str
    value: bytes
    event_id: str
    headers: tuple[tuple[str, bytes], ...] = ()


class EventEncoder(Protocol):
    """The seam to the codec: validate and encode one typed event (raise on invalid input)."""

    def encode(self, event: Any) -> EncodedRecord: ...


def encode_headers(record: EncodedRecord) -> str:
    """Headers as stored in the outbox row (JSON of [name, hex]), with the eventId header."""
    pairs = [(k, v) for k, v in record.headers if k != EVENT_ID_HEADER]
    pairs.append((EVENT_ID_HEADER, record.event_id.encode()))
    return json.dumps([[k, v.hex()] for k, v in pairs])


def decode_headers(stored: str) -> list[tuple[str, bytes]]:
    """The inverse of `encode_headers`."""
    return [(k, bytes.fromhex(v)) for k, v in json.loads(stored)]


def install(conn: Any, table: str = "runfacts_outbox") -> None:
    """Create an outbox's tables if missing (idempotent, safe to race), and commit."""
    sql = Sql(dialect_of(conn), table)
    if sql.pg:
        with conn.transaction():
            conn.execute(f"SELECT pg_advisory_xact_lock({sql.lock_class})")
            for statement in sql.ddl():
                conn.execute(statement)
            present = {row[0] for row in conn.execute(sql.header_columns_present())}
            missing = [column for _, column in HEADER_COLUMNS if column not in present]
            if missing:  # an outbox made before the header columns: add them once
                conn.execute(sql.add_header_columns(missing))
        return
    if conn.in_transaction:
        conn.commit()
    conn.execute("PRAGMA journal_mode=WAL")
    with conn:
        for statement in sql.ddl():
            conn.execute(statement)


def _describe(event: Any) -> str:
    text = repr(event)
    return text if len(text) <= 200 else text[:197] + "..."


def _checked(record: Any, event: Any) -> EncodedRecord:
    """The encoder's output if it is a complete record, else InvalidInput naming the event."""
    if not isinstance(record, EncodedRecord):
        raise InvalidInput(f"encoder returned {type(record).__name__}, not EncodedRecord, "
                           f"for event {_describe(event)}")
    missing = [name for name in ("topic", "key", "event_id") if not getattr(record, name)]
    if missing or not isinstance(record.value, bytes | bytearray):
        raise InvalidInput(f"event {_describe(event)} encoded without "
                           f"{', '.join(missing) or 'a bytes value'}")
    return record


@dataclass(frozen=True)
class Outbox:
    """An outbox table plus the encoder that turns typed events into records."""

    encoder: EventEncoder
    table: str = "runfacts_outbox"
    commands_topic: str = COMMANDS_TOPIC

    def sql(self, conn: Any) -> Sql:
        return Sql(dialect_of(conn), self.table)

    def install(self, conn: Any) -> None:
        """Create the outbox tables if missing, and commit."""
        install(conn, self.table)

    @contextmanager
    def transaction(self, conn: Any) -> Iterator[OutboxTx]:
        """One local transaction: commit on success, roll back on any exception.

        If the caller already has a transaction open, this nests as a savepoint (psycopg's
        rule, applied to SQLite too) and the caller's own commit publishes the rows.
        """
        sql = self.sql(conn)
        if sql.pg:
            with conn.transaction():
                yield OutboxTx(self, conn, sql)
            return
        nested = conn.in_transaction
        conn.execute("SAVEPOINT runfacts_outbox" if nested else "BEGIN IMMEDIATE")
        try:
            yield OutboxTx(self, conn, sql)
        except BaseException:
            if nested:
                conn.execute("ROLLBACK TO runfacts_outbox")
            conn.execute("RELEASE runfacts_outbox" if nested else "ROLLBACK")
            raise
        conn.execute("RELEASE runfacts_outbox" if nested else "COMMIT")

    def encode(self, event: Any) -> EncodedRecord:
        """The encoder's record for `event`; any encoder failure becomes InvalidInput."""
        try:
            record = self.encoder.encode(event)
        except InvalidInput:
            raise
        except Exception as exc:
            raise InvalidInput(f"event {_describe(event)} failed to encode: {exc}") from exc
        return _checked(record, event)


@dataclass
class OutboxTx:
    """Emits records into the outbox inside the caller's open transaction."""

    outbox: Outbox
    conn: Any
    sql: Sql
    _locked_runs: set[str] = field(default_factory=set)
    _notified: bool = False

    def emit(self, event: Any) -> bool:
        """Encode `event` and add it to the outbox; False if its eventId is already there."""
        return self.emit_record(self.outbox.encode(event))

    def emit_command(self, command: Any) -> bool:
        """Like `emit`, for a command: the record goes to the commands topic."""
        record = self.outbox.encode(command)
        return self.emit_record(replace(record, topic=self.outbox.commands_topic))

    def emit_record(self, record: EncodedRecord) -> bool:
        """Add an already-encoded record to the outbox."""
        record = _checked(record, record)
        if self.sql.dialect is Dialect.POSTGRES:
            self._pg_prepare(record.key)
        params: tuple[Any, ...] = (record.event_id, record.key, record.topic, bytes(record.value),
                                   encode_headers(record))
        if self.sql.pg:
            params += header_values(record.headers)
        cursor = self.conn.execute(self.sql.insert(), params)
        return cursor.rowcount == 1

    def _pg_prepare(self, run_id: str) -> None:
        if run_id not in self._locked_runs:
            self.conn.execute(self.sql.run_lock(), (run_id,))
            self._locked_runs.add(run_id)
        if not self._notified:
            self.conn.execute(f"NOTIFY {self.sql.channel}")
            self._notified = True
