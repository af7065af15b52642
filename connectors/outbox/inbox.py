"""Consumer-side dedupe: the eventIds a consumer has already processed, bounded by retention.

    inbox = Inbox.open("inbox.db")             # or Inbox(conn) on the consumer's own sqlite3
    if not inbox.seen(event_id):               # connection, to mark in the same transaction
        apply(event)                           # as the consumer's own state change
        inbox.mark(event_id, ts)
    inbox.prune(now)                           # forget ids older than now - retention_s

The outbox relay is at-least-once, so a consumer sees a duplicate (same eventId) after a relay
crash; the inbox gives it no second effect. Dedupe holds for duplicates arriving within
`retention_s` of the first delivery: keep it above the longest redelivery horizon (relay
outage + lease ttl + consumer lag). Times come from the caller, so tests and replays are
deterministic.
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass

from runfacts.connectors.outbox.sql import check_table_name
from runfacts.schemas.errors import ConfigError

DAY_S = 86400.0


@dataclass(frozen=True)
class InboxSettings:
    """Table name and how long processed eventIds are remembered."""

    table: str = "runfacts_inbox"
    retention_s: float = 7 * DAY_S

    def __post_init__(self) -> None:
        check_table_name(self.table)
        if self.retention_s <= 0:
            raise ConfigError("retention_s", self.retention_s, "must be > 0")


class Inbox:
    """A set of processed eventIds in SQLite, pruned by age."""

    def __init__(self, conn: sqlite3.Connection, settings: InboxSettings | None = None) -> None:
        self.conn = conn
        self.settings = settings or InboxSettings()
        t = self.settings.table
        conn.execute(f"CREATE TABLE IF NOT EXISTS {t} "
                     "(event_id TEXT PRIMARY KEY, ts REAL NOT NULL) WITHOUT ROWID")
        conn.execute(f"CREATE INDEX IF NOT EXISTS {t}_ts ON {t} (ts)")

    @classmethod
    def open(cls, path: str, settings: InboxSettings | None = None) -> Inbox:
        """An inbox in its own SQLite file, each mark durable on return (autocommit)."""
        conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
        conn.execute("PRAGMA journal_mode=WAL")
        return cls(conn, settings)

    def seen(self, event_id: str) -> bool:
        """True if `event_id` was marked (and not yet pruned)."""
        row = self.conn.execute(f"SELECT 1 FROM {self.settings.table} WHERE event_id = ?",
                                (event_id,)).fetchone()
        return row is not None

    def mark(self, event_id: str, ts: float) -> bool:
        """Record `event_id` as processed at `ts`; False if it was already recorded."""
        cursor = self.conn.execute(
            f"INSERT INTO {self.settings.table} (event_id, ts) VALUES (?, ?) "
            "ON CONFLICT (event_id) DO NOTHING", (event_id, ts))
        return cursor.rowcount == 1

    def prune(self, now: float) -> int:
        """Forget eventIds marked before now - retention_s; the number forgotten."""
        cutoff = now - self.settings.retention_s
        cursor = self.conn.execute(f"DELETE FROM {self.settings.table} WHERE ts < ?", (cutoff,))
        return cursor.rowcount

    def __len__(self) -> int:
        return int(self.conn.execute(f"SELECT count(*) FROM {self.settings.table}").fetchone()[0])

    def close(self) -> None:
        self.conn.close()
