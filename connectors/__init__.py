"""runfacts.connectors: the edges to other systems. They implement the ports of
runfacts.processors (the dispatcher's ToolAdapter and ArgsReader) and never the other way.

Shells: args_store (ArgsStore, SQLite or PostgreSQL), refund_adapter (RefundAdapter over HTTP). Rooms:
outbox/ (the transactional outbox), relay/ (outbox -> Kafka).
"""

from __future__ import annotations

from runfacts.doorway import lazy_modules

# the rooms, imported on first use
__all__ = ["args_store", "outbox", "refund_adapter", "relay"]


__getattr__ = lazy_modules(__name__, __all__)
