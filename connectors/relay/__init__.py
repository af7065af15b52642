"""The outbox relay: moves outbox rows to Kafka, one transaction per batch.

Pure: decisions (which rows, settlement, backoff). Shells: loop (Relay), publisher
(KafkaPublisher).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from runfacts.doorway import lazy_names

if TYPE_CHECKING:
    from runfacts.connectors.relay.loop import Relay, RelaySettings
    from runfacts.connectors.relay.publisher import KafkaPublisher

# the doorway is lazy: importing one module of this room does not load the others
_HOME = {"KafkaPublisher": "publisher", "Relay": "loop", "RelaySettings": "loop"}
__all__ = ["KafkaPublisher", "Relay", "RelaySettings"]


__getattr__ = lazy_names(__name__, _HOME)
