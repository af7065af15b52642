"""The argument store: tool-call arguments by `argsRef`, outside the event log.

Events carry only `argsRef` + `argsHash`; the raw arguments (which may hold personal data)
live here. The harness writes them when it proposes a call — on the same SQLite
connection, inside the same transaction as the outbox row of its `ProposeToolCall`, so
the arguments exist exactly when the proposal does. The dispatcher reads them back and
checks sha256(canonical JSON) against the call's `argsHash` before any call is made.

    store = ArgsStore.open("harness.db")           # or ArgsStore(conn) on your connection
    ref, digest = store.put({"orderId": "o-1", "amountMinor": 4200, "currency": "EUR"})
    arguments = store.load_verified(ref, digest)   # ArgsMissing / ArgsTampered otherwise
"""

from __future__ import annotations

import json
import re
import sqlite3
from pathlib import Path
from typing import Any, NamedTuple

from runfacts.processors.dispatcher.adapters import ArgsMissing, ArgsTampered
from runfacts.processors.policy.retry import args_hash, canonical_json
from runfacts.schemas.errors import ConfigError

_TABLE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,62}$")


class StoredArgs(NamedTuple):
    """Where arguments were stored and the hash the proposal must carry."""

    ref: str
    hash: str


class ArgsStore:
    """Arguments by reference in one SQLite table (created on first use)."""

    def __init__(self, conn: sqlite3.Connection, table: str = "runfacts_args") -> None:
        if not _TABLE.match(table):
            raise ConfigError("args table", table, "expected an SQL identifier")
        self.conn = conn
        self.table = table
        conn.execute(f"CREATE TABLE IF NOT EXISTS {table} (args_ref TEXT PRIMARY KEY, "
                     "args_hash TEXT NOT NULL, body TEXT NOT NULL)")

    @classmethod
    def open(cls, path: str | Path, table: str = "runfacts_args") -> ArgsStore:
        """A store on its own autocommit connection to the SQLite file `path`."""
        conn = sqlite3.connect(str(path), isolation_level=None, timeout=30,
                               check_same_thread=False)
        conn.execute("PRAGMA busy_timeout = 30000")
        return cls(conn, table)

    def put(self, arguments: dict[str, Any], ref: str | None = None) -> StoredArgs:
        """Store `arguments` (default ref: content-addressed `args-<sha256>`); idempotent."""
        digest = args_hash(arguments)
        ref = ref or f"args-{digest}"
        body = canonical_json(arguments).decode()
        self.conn.execute(f"INSERT INTO {self.table} (args_ref, args_hash, body) VALUES (?, ?, ?) "
                          "ON CONFLICT (args_ref) DO NOTHING", (ref, digest, body))
        stored = self.conn.execute(f"SELECT args_hash FROM {self.table} WHERE args_ref = ?",
                                   (ref,)).fetchone()
        if stored[0] != digest:
            raise ConfigError("argsRef", ref, "already holds other arguments; use a new ref")
        return StoredArgs(ref, digest)

    def get(self, ref: str) -> dict[str, Any]:
        """The arguments stored under `ref` (ArgsMissing when there are none)."""
        row = self.conn.execute(f"SELECT body FROM {self.table} WHERE args_ref = ?",
                                (ref,)).fetchone()
        if row is None:
            raise ArgsMissing(ref)
        value = json.loads(row[0])
        if not isinstance(value, dict):
            raise ArgsTampered(ref, "<a JSON object>", type(value).__name__)
        return value

    def load_verified(self, ref: str, expected_hash: str) -> dict[str, Any]:
        """The arguments under `ref`, only if they hash to `expected_hash` (else ArgsTampered)."""
        arguments = self.get(ref)
        actual = args_hash(arguments)
        if actual != expected_hash:
            raise ArgsTampered(ref, expected_hash, actual)
        return arguments

    def close(self) -> None:
        self.conn.close()
