"""A downstream MCP server (the official SDK's MCPServer, FastMCP's successor) with a counting
side effect, for the governed-MCP tests. Run as a process: `python ledger_server.py` (stdio) or
`python ledger_server.py http PORT` (streamable HTTP).

- `credit(account, amount_minor)` appends one row to `calls` for every execution (what the
  tests count) and one credit per idempotency key (`_meta["io.runfacts/idempotencyKey"]`);
  a key seen before answers the first credit. `acct-0` is closed: `isError`. With
  LEDGER_CRASH_ACCOUNT=<account> the process dies (os._exit) right after writing, once
  (LEDGER_DB + ".crashed" marks it): an answer lost after the side effect.
  With LEDGER_SLOW_ACCOUNT=<account> it waits 6 s before writing (a call in flight).
- `find_credit(external_request_id)`: the lookup: the credit that request produced, or null.
- `note(account, text)`: counted like a credit (the tests give it a short approval window).
- `balance(account)`: read-only.
"""

from __future__ import annotations

import os
import sqlite3
import sys
import time
from pathlib import Path
from typing import Annotated, Any

from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from pydantic import Field

app = MCPServer("ledger")
DB = os.environ.get("LEDGER_DB", "ledger.db")
KEY = "io.runfacts/idempotencyKey"
REQUEST = "io.runfacts/externalRequestId"


def db() -> sqlite3.Connection:
    conn = sqlite3.connect(DB, timeout=30, isolation_level=None)
    conn.execute("CREATE TABLE IF NOT EXISTS calls (n INTEGER PRIMARY KEY, request_id TEXT, key TEXT, account TEXT)")
    conn.execute("CREATE TABLE IF NOT EXISTS credits (key TEXT PRIMARY KEY, account TEXT, amount_minor INT,"
                 " credit_id TEXT)")
    conn.execute("CREATE TABLE IF NOT EXISTS requests (request_id TEXT PRIMARY KEY, key TEXT)")
    return conn


@app.tool()
def credit(account: Annotated[str, Field(pattern=r"^acct-\d+$")], amount_minor: Annotated[int, Field(gt=0)],
           ctx: Context) -> dict[str, Any]:
    """Credit an account (once per idempotency key)."""
    meta = dict(ctx.request_context.meta or {})
    key = str(meta.get(KEY) or f"no-key-{os.urandom(4).hex()}")
    request = str(meta.get(REQUEST) or key)
    if account == "acct-0":
        raise ToolError(f"account {account} is closed")  # a declared failure: isError with this text
    if os.environ.get("LEDGER_SLOW_ACCOUNT") == account:
        time.sleep(6)  # long enough to kill the dispatcher while the call is in flight
    with db() as conn:
        conn.execute("INSERT INTO calls (request_id, key, account) VALUES (?, ?, ?)", (request, key, account))
        conn.execute("INSERT OR IGNORE INTO credits VALUES (?, ?, ?, ?)", (key, account, amount_minor,
                                                                          f"cr-{len(key)}-{key[-12:]}"))
        conn.execute("INSERT OR IGNORE INTO requests VALUES (?, ?)", (request, key))
        row = conn.execute("SELECT account, amount_minor, credit_id FROM credits WHERE key = ?", (key,)).fetchone()
    marker = Path(DB + ".crashed")
    if os.environ.get("LEDGER_CRASH_ACCOUNT") == account and not marker.exists():
        marker.write_text("crashed after the credit\n")
        os._exit(17)  # the side effect happened; the answer is lost
    return {"account": row[0], "amount_minor": row[1], "credit_id": row[2]}


@app.tool()
def find_credit(external_request_id: str) -> dict[str, Any] | None:
    """The credit a request produced, or null when it never arrived."""
    with db() as conn:
        row = conn.execute("SELECT c.account, c.amount_minor, c.credit_id FROM requests r JOIN credits c "
                           "ON c.key = r.key WHERE r.request_id = ?", (external_request_id,)).fetchone()
    return None if row is None else {"account": row[0], "amount_minor": row[1], "credit_id": row[2]}


@app.tool()
def note(account: str, text: str, ctx: Context) -> dict[str, Any]:
    """Attach a note to an account (counted like a credit; its approval window is short)."""
    meta = dict(ctx.request_context.meta or {})
    with db() as conn:
        conn.execute("INSERT INTO calls (request_id, key, account) VALUES (?, ?, ?)",
                     (str(meta.get(REQUEST)), str(meta.get(KEY)), account))
    return {"account": account, "note": text}


@app.tool()
def balance(account: str) -> dict[str, Any]:
    """The sum credited to an account (read-only)."""
    with db() as conn:
        total = conn.execute("SELECT COALESCE(SUM(amount_minor), 0) FROM credits WHERE account = ?",
                             (account,)).fetchone()[0]
    return {"account": account, "balance_minor": total}


if __name__ == "__main__":
    if len(sys.argv) > 2 and sys.argv[1] == "http":
        app.run(transport="streamable-http", port=int(sys.argv[2]))
    else:
        app.run()
