"""Confluent wire format through a Confluent-compatible schema registry.

Subjects follow the record-name strategy (subject = Avro full name, e.g.
`runfacts.events.ApprovalRequired`), because one topic carries many record types. The
registry only maps schema ids to schemas: a schema fetched by id is identified by its
CRC-64-AVRO fingerprint in the shipped catalog, so the catalog stays the truth and a
schema that is registered but not shipped is rejected as unknown.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from confluent_kafka.schema_registry import Schema, SchemaRegistryClient, SchemaRegistryError

from runfacts.schemas.catalog import Catalog, SchemaEntry, default_catalog, fingerprint_of
from runfacts.schemas.codec import Codec, CodecSettings
from runfacts.schemas.errors import ConfigError, InfrastructureError

NOT_FOUND = 404


@dataclass(frozen=True)
class RegistrySettings:
    """Where the registry is and how to use it."""

    url: str
    auto_register: bool = True
    """Register a schema on first encode; False only looks it up (must be registered)."""
    client_config: dict[str, Any] = field(default_factory=dict)
    """Extra SchemaRegistryClient settings (auth, TLS)."""


class RegistrySchemaIds:
    """Schema ids <-> catalog entries, cached both ways (a registry id never changes)."""

    def __init__(self, client: SchemaRegistryClient, catalog: Catalog | None = None,
                 auto_register: bool = True) -> None:
        self.client = client
        self.catalog = catalog or default_catalog()
        self.auto_register = auto_register
        self._ids: dict[bytes, int] = {}
        self._entries: dict[int, SchemaEntry | None] = {}

    @classmethod
    def connect(cls, settings: RegistrySettings, catalog: Catalog | None = None
                ) -> RegistrySchemaIds:
        """A client for `settings.url` (`mock://...` gives confluent-kafka's in-process mock)."""
        if not settings.url.startswith(("http://", "https://", "mock://")):
            raise ConfigError("registry url", settings.url, "must be http(s):// or mock://")
        client = SchemaRegistryClient.new_client({**settings.client_config, "url": settings.url})
        return cls(client, catalog, settings.auto_register)

    def id_of(self, entry: SchemaEntry) -> int:
        """The registry id of a shipped schema (registered on first use if allowed)."""
        schema_id = self._ids.get(entry.fingerprint)
        if schema_id is None:
            schema = Schema(json.dumps(entry.raw), "AVRO")
            try:
                if self.auto_register:
                    schema_id = self.client.register_schema(entry.fullname, schema)
                else:
                    schema_id = self.client.lookup_schema(entry.fullname, schema).schema_id
            except SchemaRegistryError as exc:
                raise _infra(exc, f"registering {entry.fullname} v{entry.version}") from exc
            self._ids[entry.fingerprint] = int(schema_id)  # type: ignore[arg-type]
            self._entries[int(schema_id)] = entry  # type: ignore[arg-type]
        return self._ids[entry.fingerprint]

    def entry_of(self, schema_id: int) -> SchemaEntry | None:
        """The shipped entry a registry id names, or None if the id is unknown or not ours."""
        if schema_id not in self._entries:
            try:
                text = self.client.get_schema(schema_id).schema_str or ""
            except SchemaRegistryError as exc:
                if exc.http_status_code == NOT_FOUND:
                    return None
                raise _infra(exc, f"fetching schema id {schema_id}") from exc
            try:
                found = self.catalog.by_fingerprint.get(fingerprint_of(json.loads(text)))
            except Exception:  # a schema we cannot even canonicalise is not one of ours
                found = None
            self._entries[schema_id] = found
        return self._entries[schema_id]


def _infra(exc: SchemaRegistryError, doing: str) -> InfrastructureError:
    retryable = exc.http_status_code is None or exc.http_status_code >= 500
    return InfrastructureError(f"schema registry failed {doing}: {exc}", retryable=retryable)


def registry_codec(settings: RegistrySettings, codec_settings: CodecSettings | None = None,
                   catalog: Catalog | None = None) -> Codec:
    """A codec that writes the Confluent wire format and reads both framings."""
    base = codec_settings or CodecSettings()
    ids = RegistrySchemaIds.connect(settings, catalog)
    return Codec(CodecSettings(validate=base.validate, confluent=True), catalog, ids)
