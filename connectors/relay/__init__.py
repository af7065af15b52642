"""The outbox relay: moves outbox rows to Kafka, one transaction per batch.

Pure: decisions (which rows, settlement, backoff). Shells: loop (Relay), publisher
(KafkaPublisher).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from runfacts.connectors.relay.loop import Relay, RelaySettings
    from runfacts.connectors.relay.publisher import KafkaPublisher

# the doorway is lazy: importing one module of this room does not load the others
_HOME = {"KafkaPublisher": "publisher", "Relay": "loop", "RelaySettings": "loop"}
__all__ = ["KafkaPublisher", "Relay", "RelaySettings"]


def __getattr__(name: str) -> Any:
    if name in _HOME:
        return getattr(importlib.import_module(f"{__name__}.{_HOME[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
