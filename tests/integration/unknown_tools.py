"""Tools for test_tools_unknown.py: two that write their ledger row and then lose the
connection (one with a lookup, one without), and a read-only one without a lookup.
The ledger is the SQLite file $UNKNOWN_LEDGER."""

from __future__ import annotations

import os
import sqlite3
from contextlib import closing

from pydantic import BaseModel

from runfacts.tools import LookupContext, ToolContext, ToolRegistry

registry = ToolRegistry("unknown")


class Charge(BaseModel):
    charge_id: str
    account: str
    amount_minor: int


def _ledger() -> sqlite3.Connection:
    db = sqlite3.connect(os.environ["UNKNOWN_LEDGER"], isolation_level=None, timeout=10)
    db.execute("CREATE TABLE IF NOT EXISTS charges (idempotency_key TEXT PRIMARY KEY, request_id TEXT,"
               " charge_id TEXT, account TEXT, amount_minor INTEGER)")
    db.execute("CREATE TABLE IF NOT EXISTS reads (request_id TEXT, account TEXT)")
    return db


def _charge_then_reset(account: str, amount_minor: int, ctx: ToolContext) -> Charge:
    with closing(_ledger()) as db:
        db.execute("INSERT OR IGNORE INTO charges VALUES (?, ?, ?, ?, ?)",
                   (ctx.idempotency_key, ctx.external_request_id, f"ch-{ctx.tool_call_id}", account, amount_minor))
    # the money moved; the answer never arrives (what an HTTP client raises when the peer resets)
    raise ConnectionResetError(104, "Connection reset by peer")


@registry.tool("ledger.charge", risk="low", retry="standard")
def charge(account: str, amount_minor: int, ctx: ToolContext) -> Charge:
    return _charge_then_reset(account, amount_minor, ctx)


@registry.lookup("ledger.charge")
def find_charge(ctx: LookupContext) -> Charge | None:
    with closing(_ledger()) as db:
        row = db.execute("SELECT charge_id, account, amount_minor FROM charges WHERE request_id = ?",
                         (ctx.external_request_id,)).fetchone()
    return None if row is None else Charge(charge_id=row[0], account=row[1], amount_minor=row[2])


@registry.tool("ledger.charge_blind", risk="low", retry="standard")
def charge_blind(account: str, amount_minor: int, ctx: ToolContext) -> Charge:
    """The same charge, without a lookup: nothing can reconcile it."""
    return _charge_then_reset(account, amount_minor, ctx)


class Balance(BaseModel):
    account: str
    charged_minor: int


@registry.tool("ledger.balance", risk="low", retry="standard", read_only=True)
def balance(account: str, ctx: ToolContext) -> Balance:
    """Read-only, no lookup: after a lost answer it is simply run again."""
    with closing(_ledger()) as db:
        db.execute("INSERT INTO reads VALUES (?, ?)", (ctx.external_request_id, account))
        (reads,) = db.execute("SELECT COUNT(*) FROM reads WHERE account = ?", (account,)).fetchone()
        if account.startswith("flaky-") and reads == 1:  # the first read loses its connection
            raise ConnectionResetError(104, "Connection reset by peer")
        (total,) = db.execute("SELECT COALESCE(SUM(amount_minor), 0) FROM charges WHERE account = ?",
                              (account,)).fetchone()
    return Balance(account=account, charged_minor=total)
