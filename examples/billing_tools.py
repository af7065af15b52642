"""Two custom tools for `runfacts worker dispatcher --tools examples.billing_tools:registry`.

`billing.credit` credits a customer account in a small SQLite ledger (a stand-in for your
billing system): high risk, needs a support agent's approval, at most one credit per
idempotency key, and a lookup so a lost response is reconciled instead of re-run.
`billing.balance` is an async read that needs no approval. The ledger file is
$BILLING_LEDGER (default ./billing-ledger.db).
"""

from __future__ import annotations

import asyncio
import os
import sqlite3
from contextlib import closing
from typing import Annotated

from pydantic import BaseModel, Field

from runfacts.tools import LookupContext, ToolContext, ToolError, ToolRegistry

registry = ToolRegistry("billing")


class Credit(BaseModel):
    credit_id: str
    account: str
    amount_minor: int


def _ledger() -> sqlite3.Connection:
    db = sqlite3.connect(os.environ.get("BILLING_LEDGER", "billing-ledger.db"), isolation_level=None)
    db.execute("CREATE TABLE IF NOT EXISTS credits (idempotency_key TEXT PRIMARY KEY, request_id TEXT,"
               " credit_id TEXT, account TEXT, amount_minor INTEGER)")
    return db


def _credit(row: tuple[str, str, int] | None) -> Credit | None:
    return None if row is None else Credit(credit_id=row[0], account=row[1], amount_minor=row[2])


@registry.tool("billing.credit", risk="high", needs_approval=True, required_role="support_agent",
               retry="standard", reconcile_within_ms=600_000, approval_ttl_ms=900_000)
def credit(account: Annotated[str, Field(pattern=r"^acct-\d+$")],
           amount_minor: Annotated[int, Field(gt=0, le=50_000)], ctx: ToolContext) -> Credit:
    """Credit the account once per idempotency key (a repeated key returns the first credit)."""
    if account == "acct-0":
        raise ToolError("account_closed", f"{account} is closed")  # not retryable
    with closing(_ledger()) as db:
        db.execute("INSERT OR IGNORE INTO credits VALUES (?, ?, ?, ?, ?)",
                   (ctx.idempotency_key, ctx.external_request_id, f"cr-{ctx.tool_call_id}", account,
                    amount_minor))
        row = db.execute("SELECT credit_id, account, amount_minor FROM credits WHERE idempotency_key = ?",
                         (ctx.idempotency_key,)).fetchone()
    return Credit(credit_id=row[0], account=row[1], amount_minor=row[2])


@registry.lookup("billing.credit")
def find_credit(ctx: LookupContext) -> Credit | None:
    """The credit a request made (None: the request never reached the ledger)."""
    with closing(_ledger()) as db:
        return _credit(db.execute("SELECT credit_id, account, amount_minor FROM credits"
                                  " WHERE request_id = ?", (ctx.external_request_id,)).fetchone())


class Balance(BaseModel):
    account: str
    balance_minor: int


@registry.tool("billing.balance", risk="low", required_role="support_agent", retry="none")
async def balance(account: str, ctx: ToolContext) -> Balance:
    """The account's credited total (async: runs on the dispatcher's event loop)."""
    await asyncio.sleep(0.01)
    with closing(_ledger()) as db:
        (total,) = db.execute("SELECT COALESCE(SUM(amount_minor), 0) FROM credits WHERE account = ?",
                              (account,)).fetchone()
    return Balance(account=account, balance_minor=total)
