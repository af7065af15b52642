"""The transactional outbox: a service writes events or commands in its own database
transaction; the relay publishes them.

Pure: sql (per-dialect SQL), debezium (the Kafka Connect config of Debezium publishing a
PostgreSQL outbox instead of the relay). Shells: writer (Outbox, what a service calls), commands
(commands through the outbox), store (the outbox tables: fetch, mark, park, lease), inbox
(consumer-side dedupe in the same tables).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from runfacts.doorway import lazy_names

if TYPE_CHECKING:
    from runfacts.connectors.outbox.commands import CommandOutbox
    from runfacts.connectors.outbox.debezium import DebeziumOutbox
    from runfacts.connectors.outbox.inbox import Inbox, InboxSettings
    from runfacts.connectors.outbox.store import OutboxStore
    from runfacts.connectors.outbox.writer import EncodedRecord, Outbox

# the doorway is lazy: importing one module of this room does not load the others
_HOME = {
    "CommandOutbox": "commands",
    "DebeziumOutbox": "debezium",
    "EncodedRecord": "writer",
    "Inbox": "inbox",
    "InboxSettings": "inbox",
    "Outbox": "writer",
    "OutboxStore": "store",
}
__all__ = ["CommandOutbox", "DebeziumOutbox", "EncodedRecord", "Inbox", "InboxSettings", "Outbox", "OutboxStore"]


__getattr__ = lazy_names(__name__, _HOME)
