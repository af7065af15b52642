"""The Kafka Connect configuration of Debezium's PostgreSQL connector reading an outbox: pure.

The alternative to the built-in relay (docs/decisions/0008-debezium.md): Debezium streams the
outbox table's inserts from the WAL (logical decoding, pgoutput) and its outbox event router
(io.debezium.transforms.outbox.EventRouter) turns each row into the record the relay would
publish, byte for byte where the decider looks:

- topic: the row's `topic` column (route.by.field=topic, replacement `${routedByValue}`);
- key: the row's `run_id`, as UTF-8 (StringConverter), so the same partition as the relay's
  (both partition by murmur2 of the key);
- value: the row's `value` bytea unchanged, the Avro single-object record (binary.handling.mode=
  bytes, ByteArrayConverter);
- headers: commandType (eventType for an events outbox), schemaVersion, commandId, eventId and
  the trace context from the outbox's header columns (sql.HEADER_COLUMNS), as UTF-8 text
  (StringConverter). A header the row lacks (no trace context) is a header with a null value,
  which every runfacts reader treats as absent; Debezium's own `id` header is dropped and its
  `__debezium.context.*` headers are off.

The relay marks rows published with an UPDATE and the router ignores updates and deletes, so
one table can be switched between the two, but never published by both at once.
"""

from __future__ import annotations

import json
import re
import zlib
from dataclasses import dataclass
from typing import Any, Literal
from urllib.parse import parse_qsl, unquote, urlsplit

from runfacts.connectors.outbox.sql import check_table_name
from runfacts.schemas.errors import ConfigError

CONNECTOR_CLASS = "io.debezium.connector.postgresql.PostgresConnector"
EVENT_ROUTER = "io.debezium.transforms.outbox.EventRouter"
STRING_CONVERTER = "org.apache.kafka.connect.storage.StringConverter"
BYTES_CONVERTER = "org.apache.kafka.connect.converters.ByteArrayConverter"
DROP_HEADERS = "org.apache.kafka.connect.transforms.DropHeaders"
Kind = Literal["commands", "events"]
# (column, header) placed on each record, in the relay's header order (codec headers, eventId,
# then the trace context): the record of a command, or of an event
PLACEMENT: dict[str, tuple[tuple[str, str], ...]] = {
    "commands": (("command_type", "commandType"), ("schema_version", "schemaVersion"),
                 ("command_id", "commandId"), ("event_id", "eventId"),
                 ("traceparent", "traceparent"), ("tracestate", "tracestate")),
    "events": (("event_type", "eventType"), ("schema_version", "schemaVersion"),
               ("event_id", "eventId"), ("traceparent", "traceparent"), ("tracestate", "tracestate")),
}
_SLOT_UNSAFE = re.compile(r"[^a-z0-9_]")
_SNAPSHOT_MODES = ("initial", "no_data")


@dataclass(frozen=True)
class PgTarget:
    """Where the outbox lives, from a postgresql:// DSN."""

    host: str
    port: int
    user: str
    password: str
    dbname: str
    options: tuple[tuple[str, str], ...] = ()

    @classmethod
    def from_dsn(cls, dsn: str) -> PgTarget:
        parts = urlsplit(dsn)
        if parts.scheme not in ("postgresql", "postgres"):
            raise ConfigError("--dsn", _masked(dsn), "Debezium reads PostgreSQL: give a postgresql:// DSN")
        dbname = unquote(parts.path.lstrip("/"))
        if not parts.hostname or not parts.username or not dbname:
            raise ConfigError("--dsn", _masked(dsn), "needs user, host and database: "
                              "postgresql://USER[:PASSWORD]@HOST[:PORT]/DATABASE")
        return cls(parts.hostname, parts.port or 5432, unquote(parts.username),
                   unquote(parts.password or ""), dbname, tuple(parse_qsl(parts.query)))


def _masked(dsn: str) -> str:
    return re.sub(r"(://[^:/@]+:)[^@]*@", r"\1***@", dsn)


def slot_name(prefix: str, table: str) -> str:
    """A replication slot name for (prefix, table): [a-z0-9_], at most 63 characters, stable."""
    raw = _SLOT_UNSAFE.sub("_", f"rf_{prefix}_{table}".lower())
    if len(raw) <= 63:
        return raw
    return f"{raw[:54]}_{zlib.crc32(raw.encode()):08x}"


@dataclass(frozen=True)
class DebeziumOutbox:
    """One Debezium connector publishing one outbox table (SQL: `<schema>.<table>`)."""

    dsn: str
    prefix: str
    table: str = "runfacts_outbox"
    schema: str = "public"
    kind: Kind = "commands"
    snapshot: str = "initial"
    poll_interval_ms: int = 50
    name: str = ""

    def __post_init__(self) -> None:
        check_table_name(self.table)
        if not self.prefix:
            raise ConfigError("--prefix", self.prefix, "give the runfacts topic prefix, e.g. runfacts")
        if self.kind not in PLACEMENT:
            raise ConfigError("--kind", self.kind, f"one of {', '.join(PLACEMENT)}")
        if self.snapshot not in _SNAPSHOT_MODES:
            raise ConfigError("--snapshot", self.snapshot, f"one of {', '.join(_SNAPSHOT_MODES)}: initial "
                              "publishes the rows already in the table first, no_data only new ones")
        PgTarget.from_dsn(self.dsn)

    @property
    def connector_name(self) -> str:
        return self.name or f"runfacts-outbox-{self.prefix}-{self.table}"

    @property
    def slot(self) -> str:
        return slot_name(self.prefix, self.table)

    def config(self) -> dict[str, str]:
        """The connector's configuration (PUT /connectors/<name>/config takes exactly this)."""
        pg = PgTarget.from_dsn(self.dsn)
        placement = ",".join(f"{column}:header:{header}" for column, header in PLACEMENT[self.kind])
        config = {
            "connector.class": CONNECTOR_CLASS,
            "tasks.max": "1",
            "database.hostname": pg.host,
            "database.port": str(pg.port),
            "database.user": pg.user,
            "database.password": pg.password,
            "database.dbname": pg.dbname,
            **{f"database.{key}": value for key, value in pg.options},
            # Debezium's logical name: the key of its offsets, the prefix of topics it would make
            "topic.prefix": f"{self.prefix}.outbox.{self.table}",
            "plugin.name": "pgoutput",
            "slot.name": self.slot,
            "publication.name": f"{self.slot}_pub",
            "publication.autocreate.mode": "filtered",
            "table.include.list": f"{self.schema}.{self.table}",
            "snapshot.mode": self.snapshot,
            "tombstones.on.delete": "false",
            "extended.headers.enabled": "false",  # no __debezium.context.* headers on the record
            "binary.handling.mode": "bytes",
            "poll.interval.ms": str(self.poll_interval_ms),
            "key.converter": STRING_CONVERTER,
            "value.converter": BYTES_CONVERTER,
            "header.converter": STRING_CONVERTER,
            "transforms": "outbox,dropid",
            "transforms.outbox.type": EVENT_ROUTER,
            "transforms.outbox.table.field.event.id": "event_id",
            "transforms.outbox.table.field.event.key": "run_id",
            "transforms.outbox.table.field.event.payload": "value",
            "transforms.outbox.route.by.field": "topic",
            "transforms.outbox.route.topic.replacement": "${routedByValue}",
            "transforms.outbox.table.fields.additional.placement": placement,
            # the relay's UPDATEs (status = published) are not events: skip them quietly
            "transforms.outbox.table.op.invalid.behavior": "warn",
            "transforms.dropid.type": DROP_HEADERS,
            "transforms.dropid.headers": "id",
        }
        return config

    def connector(self) -> dict[str, Any]:
        """{"name", "config"}: what POST /connectors takes and `scripts/kafka-connect.sh apply` reads."""
        return {"name": self.connector_name, "config": self.config()}

    def as_json(self) -> str:
        return json.dumps(self.connector(), indent=2)
