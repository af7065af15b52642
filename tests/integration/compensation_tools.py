"""Shop tools whose completed calls declare their compensation (issue 35), served by the real
dispatcher in tests/integration/test_compensation_kafka.py. Every call (and every undo) is one
row of the ledger $BILLING_LEDGER, once per idempotency key, so a test counts the side effects."""

from __future__ import annotations

import os
import sqlite3
from contextlib import closing

from runfacts.tools import ToolContext, ToolError, ToolRegistry

registry = ToolRegistry("compensation")


def _book(ctx: ToolContext, kind: str, ref: str, amount: int) -> None:
    with closing(sqlite3.connect(os.environ["BILLING_LEDGER"], isolation_level=None)) as db:
        db.execute("CREATE TABLE IF NOT EXISTS shop (idempotency_key TEXT PRIMARY KEY, kind TEXT, ref TEXT, "
                   "amount INTEGER, at INTEGER)")
        db.execute("INSERT OR IGNORE INTO shop VALUES (?, ?, ?, ?, (SELECT COUNT(*) FROM shop))",
                   (ctx.idempotency_key, kind, ref, amount))


@registry.tool("shop.reserve", compensation=("shop.release", {"reservation_id": "result.reservation_id",
                                                              "qty": "args.qty"}))
def reserve(sku: str, qty: int, ctx: ToolContext) -> dict[str, object]:
    """Hold `qty` of `sku`."""
    _book(ctx, "reserve", sku, qty)
    return {"reservation_id": f"res-{ctx.tool_call_id}"}


@registry.tool("shop.release")
def release(reservation_id: str, qty: int, ctx: ToolContext) -> None:
    """Give a reservation back."""
    _book(ctx, "release", reservation_id, qty)


@registry.tool("shop.charge", risk="high", compensation=("shop.refund", {"charge_id": "result.charge_id",
                                                                         "amount_minor": "args.amount_minor"}))
def charge(order_id: str, amount_minor: int, ctx: ToolContext) -> dict[str, object]:
    """Charge the customer."""
    _book(ctx, "charge", order_id, amount_minor)
    return {"charge_id": f"ch-{ctx.tool_call_id}"}


@registry.tool("shop.refund", risk="high")
def refund(charge_id: str, amount_minor: int, ctx: ToolContext) -> None:
    """Refund a charge (declined, not retryable, while the file `$BILLING_LEDGER.refunds-down` exists)."""
    if os.path.exists(os.environ["BILLING_LEDGER"] + ".refunds-down"):
        raise ToolError("refund_declined", retryable=False)
    _book(ctx, "refund", charge_id, amount_minor)
