"""runfacts.connectors: the edges to other systems. They implement the ports of
runfacts.processors (the dispatcher's ToolAdapter and ArgsReader) and never the other way.

Shells: args_store (ArgsStore, SQLite or PostgreSQL), refund_adapter (RefundAdapter over HTTP). Rooms:
outbox/ (the transactional outbox), relay/ (outbox -> Kafka).
"""

from __future__ import annotations

import importlib
from typing import Any

# the rooms, imported on first use
__all__ = ["args_store", "outbox", "refund_adapter", "relay"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        return importlib.import_module(f"{__name__}.{name}")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
