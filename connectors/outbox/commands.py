"""Commands through the transactional outbox: what a harness or UI backend calls.

    harness = CommandOutbox.open("harness.db", TopicNames("runfacts"))
    harness.send(CreateRun(...))                             # one local transaction
    stored = harness.propose(lambda ref, digest: ProposeToolCall(... argsRef=ref, argsHash=digest ...),
                             {"orderId": "order-001", "amountMinor": 4200, "currency": "EUR"})

`open` takes a SQLite file or a postgresql:// URL. `propose` writes the arguments to the
argument store (a table of the same database) and the proposal to the outbox in ONE local
transaction: the dispatcher can never see a proposal whose arguments are missing,
and a rolled-back proposal leaves no arguments behind. The relay (runfacts.connectors.relay)
publishes the rows to the commands topic, keyed by runId, with the commandId as eventId.

With `sources` (the service's source keys, RUNFACTS_SOURCE_KEYS) each row is signed as it is
written, for the command's `authSource` (`runfacts.processors.policy.sources`): the row holds
the signed bytes and the signature headers, the relay publishes them unchanged, and the
decider refuses a row edited after it was written.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from runfacts.connectors.args_store import ArgsStore, StoredArgs
from runfacts.connectors.outbox.store import connect
from runfacts.connectors.outbox.writer import EncodedRecord, Outbox
from runfacts.ids import check_command
from runfacts.processors.policy.sources import SourceKeys, sign
from runfacts.schemas import codec
from runfacts.schemas.common import CommandBase
from runfacts.topics import TopicNames


@dataclass(frozen=True)
class CommandEncoder:
    """The outbox's encoder for commands: Avro single-object bytes, key runId, id commandId."""

    topic: str
    sources: SourceKeys | None = field(default=None, repr=False)
    """Signing keys of the sources this service writes for (None: rows are unsigned)."""
    protect: Callable[[CommandBase], CommandBase] | None = field(default=None, repr=False)
    """Seals the personal fields before the row is written (runfacts.privacy; None: plain)."""

    def encode(self, command: CommandBase) -> EncodedRecord:
        check_command(command)  # ids, references, amounts (runfacts.ids): refused before the row is written
        if self.protect is not None:
            command = self.protect(command)
        value = codec.encode(command)
        signed = () if self.sources is None else tuple(sign(self.sources, command.actor.authSource, value))
        return EncodedRecord(self.topic, command.runId, value, command.commandId,
                             tuple((k, v) for k, v in codec.headers(command) if v is not None) + signed)


class CommandOutbox:
    """An outbox for commands plus the argument store, on one connection (SQLite or psycopg 3)."""

    def __init__(self, conn: Any, names: TopicNames, table: str = "runfacts_outbox",
                 sources: SourceKeys | None = None,
                 protect: Callable[[CommandBase], CommandBase] | None = None) -> None:
        self.conn = conn
        self.outbox = Outbox(CommandEncoder(names.commands, sources, protect), table=table,
                             commands_topic=names.commands)
        self.outbox.install(conn)
        self.args = ArgsStore(conn)

    @classmethod
    def open(cls, path: str | Path, names: TopicNames, table: str = "runfacts_outbox",
             sources: SourceKeys | None = None,
             protect: Callable[[CommandBase], CommandBase] | None = None) -> CommandOutbox:
        return cls(connect(str(path)), names, table, sources, protect)

    def send(self, *commands: CommandBase) -> None:
        """Queue commands for publishing, in order, in one local transaction."""
        with self.outbox.transaction(self.conn) as tx:
            for command in commands:
                tx.emit_command(command)

    def propose(self, build: Callable[[str, str], CommandBase], arguments: dict[str, Any],
                ref: str | None = None) -> StoredArgs:
        """Store `arguments` and queue the proposal `build(argsRef, argsHash)`, atomically."""
        with self.outbox.transaction(self.conn) as tx:
            stored = self.args.put(arguments, ref)
            tx.emit_command(build(stored.ref, stored.hash))
        return stored

    def close(self) -> None:
        self.conn.close()
