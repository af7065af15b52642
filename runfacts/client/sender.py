"""How the client's commands reach the commands topic (shell): one idempotent producer, or an
outbox for services that write their own data in the same local transaction.

- `DirectSender`: one process-wide idempotent producer (acks=all, key runId, murmur2), each
  send flushed before it returns; arguments go to the argument store first, then the proposal.
- `OutboxSender`: rows in the service's outbox (a SQLite file or a PostgreSQL URL), published
  by a relay (in this process unless `relay=False`; else `runfacts outbox relay`). The
  arguments live in the outbox's own database (table runfacts_args), written in ONE local
  transaction with the proposal's outbox row (`CommandOutbox.propose`), on SQLite and on
  PostgreSQL alike; the dispatcher's `--args-store` names that database.
Both sign each command for its `authSource` with this process's source keys
(RUNFACTS_SOURCE_KEYS[_FILE], when set); the outbox row holds the signed bytes.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Protocol

from confluent_kafka import KafkaError, Producer

from runfacts.connectors.args_store import ArgsStore, StoredArgs
from runfacts.connectors.outbox.commands import CommandOutbox
from runfacts.connectors.outbox.store import is_postgres_dsn, shown_db
from runfacts.connectors.relay import Relay, RelaySettings
from runfacts.ids import check_command
from runfacts.processors.policy.sources import SourceKeys, sign
from runfacts.schemas.codec import Codec
from runfacts.schemas.common import CommandBase
from runfacts.schemas.errors import ConfigError, InfrastructureError
from runfacts.security.acls import client_relay_prefix
from runfacts.settings import KafkaSettings
from runfacts.topics import TopicNames

Build = Callable[[str, str], CommandBase]
Protect = Callable[[CommandBase], CommandBase]


class Sender(Protocol):
    """What the client needs from a way to send commands."""

    def send(self, *commands: CommandBase) -> None: ...

    def propose(self, build: Build, arguments: dict[str, Any], ref: str | None = None) -> StoredArgs: ...

    def close(self) -> None: ...


def _args_store(path: str | Path | None) -> ArgsStore | None:
    return None if path is None else ArgsStore.open(path)


def _no_args_store() -> ConfigError:
    return ConfigError("args_store", None, "proposing a tool call needs the argument store the dispatcher "
                                           "reads: Runfacts.connect(args_store='harness.db') (its --args-store)")


class DirectSender:
    """Commands through one idempotent producer."""

    def __init__(self, kafka: KafkaSettings, names: TopicNames, args_store: str | Path | None,
                 timeout_s: float = 30.0, codec: Codec | None = None, sources: SourceKeys | None = None,
                 protect: Protect | None = None) -> None:
        self.names, self.timeout_s, self.sources, self.protect = names, timeout_s, sources, protect
        self.codec = codec or Codec()
        self.args = _args_store(args_store)
        self._lock = threading.Lock()
        self._producer = Producer(kafka.producer_config(**{"enable.idempotence": True, "acks": "all", "linger.ms": 0}))

    def send(self, *commands: CommandBase) -> None:
        for command in commands:  # none is sent when one is outside the contract (runfacts.ids)
            check_command(command)
        errors: list[str] = []

        def delivered(err: KafkaError | None, _msg: Any) -> None:
            if err is not None:
                errors.append(str(err))

        with self._lock:
            for command in commands:
                if self.protect is not None:  # seal personal fields before signing (runfacts.privacy)
                    command = self.protect(command)
                value = self.codec.encode(command)
                headers: list[tuple[str, str | bytes | None]] = list(self.codec.headers(command))
                if self.sources is not None:
                    headers += sign(self.sources, command.actor.authSource, value)
                self._producer.produce(self.names.commands, value, command.runId.encode(),
                                       headers=headers, on_delivery=delivered)
            left = self._producer.flush(self.timeout_s)
        if left or errors:
            why = errors[0] if errors else f"not delivered within {self.timeout_s:g}s"
            raise InfrastructureError(f"sending {', '.join(c.commandType for c in commands)} to "
                                      f"{self.names.commands}: {why}", retryable=True)

    def propose(self, build: Build, arguments: dict[str, Any], ref: str | None = None) -> StoredArgs:
        if self.args is None:
            raise _no_args_store()
        with self._lock:
            stored = self.args.put(arguments, ref)
        self.send(build(stored.ref, stored.hash))
        return stored

    @contextmanager
    def transaction(self) -> Iterator[Any]:
        raise ConfigError("outbox", None, "a transaction needs an outbox: Runfacts.connect(outbox='app.db')")
        yield  # pragma: no cover

    def close(self) -> None:
        self._producer.flush(5)
        if self.args is not None:
            self.args.close()


class OutboxSender:
    """Commands as outbox rows in the service's database, published by a relay."""

    def __init__(self, kafka: KafkaSettings, names: TopicNames, db: str, args_store: str | Path | None,
                 relay: bool = True, table: str = "runfacts_outbox", sources: SourceKeys | None = None,
                 protect: Protect | None = None) -> None:
        if args_store is not None and not same_database(str(args_store), db):
            raise ConfigError("args_store", shown_db(str(args_store)),
                              f"with an outbox the arguments are written in the outbox's transaction, in its "
                              f"database {shown_db(db)}: leave args_store unset and point the dispatcher's "
                              f"--args-store at {shown_db(db)}")
        self.db, self.table = db, table
        self._lock = threading.RLock()
        self._outbox = CommandOutbox.open(db, names, table, sources, protect)
        self.conn, self.outbox, self.args = self._outbox.conn, self._outbox.outbox, self._outbox.args
        self._relay: Relay | None = None
        self._thread: threading.Thread | None = None
        if relay:
            self._start_relay(kafka, names)

    def _start_relay(self, kafka: KafkaSettings, names: TopicNames) -> None:
        settings = RelaySettings(db=self.db, bootstrap=kafka.bootstrap_servers, table=self.table, poll_interval_s=0.05,
                                 lease_ttl_s=5.0, transactional_id=f"{client_relay_prefix(names.prefix)}{self.table}",
                                 producer_config=dict(kafka.client_config()) | {"bootstrap.servers":
                                                                                 kafka.bootstrap_servers})
        self._relay = Relay(settings, holder="runfacts-client")
        self._thread = threading.Thread(target=self._relay.run, name="runfacts-client-relay", daemon=True)
        self._thread.start()

    def send(self, *commands: CommandBase) -> None:
        with self._lock, self.outbox.transaction(self.conn) as tx:
            for command in commands:
                tx.emit_command(command)

    def propose(self, build: Build, arguments: dict[str, Any], ref: str | None = None) -> StoredArgs:
        with self._lock:
            return self._outbox.propose(build, arguments, ref)

    @contextmanager
    def transaction(self) -> Iterator[Any]:
        """The outbox connection inside one open transaction: the caller's writes on it and every
        command sent meanwhile commit together (or roll back together)."""
        with self._lock, self.outbox.transaction(self.conn):
            yield self.conn

    def close(self) -> None:
        if self._relay is not None:
            self._relay.stop()
            if self._thread is not None:
                self._thread.join(10)
        self.conn.close()


def same_database(a: str, b: str) -> bool:
    """True when two settings name one database (a URL compared as written, a file by its path)."""
    if is_postgres_dsn(a) or is_postgres_dsn(b):
        return a == b
    return Path(a.removeprefix("sqlite:///")).resolve() == Path(b.removeprefix("sqlite:///")).resolve()


log = logging.getLogger("runfacts.client")
