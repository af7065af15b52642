"""The packaged registry: `payments.refund` at the payment provider (the demo's tool).

The refund is a ready-made adapter (`connectors.refund_adapter.RefundAdapter`: HTTP with
typed transport outcomes), registered with the packaged manifest entry. It is built only
when served, so the payment API key (RUNFACTS_PAYMENT_API_KEY[_FILE]) is needed only by a
dispatcher that serves `payments.refund`.
"""

from __future__ import annotations

from collections.abc import Mapping

from runfacts.connectors.adapters import ToolAdapter
from runfacts.processors.capabilities import load_capabilities
from runfacts.tools.registry import ToolRegistry

REFUND = "payments.refund"


def build_refund(options: Mapping[str, str]) -> ToolAdapter:
    """The refund adapter; option `provider_url` (the CLI's --provider-url) overrides
    RUNFACTS_PAYMENT_URL. Raises ConfigError naming RUNFACTS_PAYMENT_API_KEY without a key."""
    from runfacts.connectors.refund_adapter import RefundAdapter, RefundAdapterSettings

    url = options.get("provider_url", "")
    return RefundAdapter(RefundAdapterSettings(url=url) if url else RefundAdapterSettings())


def refund_registry() -> ToolRegistry:
    """A registry holding the refund tool (add your own tools to it, or to a registry of yours)."""
    tools = ToolRegistry("refund")
    tools.adapter(load_capabilities().get(REFUND), build_refund)
    return tools


registry = refund_registry()
