"""A tool registry of the tests' own for runfacts.testing: `payments.refund` as a plain Python
tool over an in-memory ledger (one refund per idempotency key) with a lookup, so a lost response
or a crashed dispatcher is reconciled through the tool's own lookup."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel

from runfacts.tools import LookupContext, ToolContext, ToolRegistry


class Refund(BaseModel):
    refundId: str  # noqa: N815 - the provider's field names, as the guide prints them
    orderId: str  # noqa: N815
    amountMinor: int  # noqa: N815


@dataclass
class Shop:
    """The registry and the ledger its refund tool writes (the provider's ground truth)."""

    registry: ToolRegistry = field(default_factory=lambda: ToolRegistry("shop"))
    ledger: dict[str, dict[str, Any]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        @self.registry.tool("payments.refund", risk="high", needs_approval=True, required_role="support_agent",
                            approval_ttl_ms=900_000)
        def refund(orderId: str, amountMinor: int, currency: str, ctx: ToolContext) -> Refund:  # noqa: N803
            entry = self.ledger.setdefault(ctx.idempotency_key, {
                "refundId": f"re-{len(self.ledger) + 1}", "orderId": orderId, "amountMinor": amountMinor,
                "request": ctx.external_request_id})
            return Refund(refundId=entry["refundId"], orderId=entry["orderId"], amountMinor=entry["amountMinor"])

        @self.registry.lookup("payments.refund")
        def find_refund(ctx: LookupContext) -> Refund | None:
            for entry in self.ledger.values():
                if entry["request"] == ctx.external_request_id:
                    return Refund(refundId=entry["refundId"], orderId=entry["orderId"],
                                  amountMinor=entry["amountMinor"])
            return None
