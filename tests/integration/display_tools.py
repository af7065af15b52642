"""A credit tool with an approval rule and an argument display (issue 33), served by the real
dispatcher in tests/integration/test_argument_display_kafka.py: credits above 5,000 cents ask a
support agent, at most 100,000 cents, the customer's name is personal."""

from __future__ import annotations

import os
import sqlite3
from contextlib import closing
from typing import Annotated

from pydantic import Field

from runfacts.tools import ToolContext, ToolRegistry

registry = ToolRegistry("display")


@registry.tool("billing.issue_credit", risk="high", required_role="support_agent",
               approval_when=[("amount_cents", ">", 5_000)])
def issue_credit(account: Annotated[str, Field(pattern=r"^acct-\d+$")],
                 amount_cents: Annotated[int, Field(gt=0, le=100_000, json_schema_extra={"unit": "cents"})],
                 customer: Annotated[str, Field(json_schema_extra={"pii": True})],
                 ctx: ToolContext) -> dict[str, object]:
    """Credit the account once per idempotency key (the ledger is $BILLING_LEDGER)."""
    with closing(sqlite3.connect(os.environ["BILLING_LEDGER"], isolation_level=None)) as db:
        db.execute("CREATE TABLE IF NOT EXISTS credits (idempotency_key TEXT PRIMARY KEY, account TEXT,"
                   " amount_cents INTEGER)")
        db.execute("INSERT OR IGNORE INTO credits VALUES (?, ?, ?)", (ctx.idempotency_key, account, amount_cents))
    return {"account": account, "amount_cents": amount_cents}
