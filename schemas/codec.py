"""Bytes <-> contract models.

Framing (the first bytes of a Kafka value):
- Avro single-object encoding (default, no registry): C3 01, the writer schema's
  CRC-64-AVRO fingerprint (8 bytes, little-endian), the Avro body.
- Confluent wire format (when a registry is configured): 00, a 4-byte big-endian schema
  id, the Avro body. See `runfacts.schemas.registry`.
Decoding reads either framing, resolves the writer schema through the catalog of every
shipped version, reads into the current reader schema, upcasts, then builds the model.
`eventType`/`commandType`, `schemaVersion` and the id also travel as Kafka headers.
Every bad input raises `InvalidInput` naming the position, schema, version and what failed.
"""

from __future__ import annotations

import io
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from typing import Any, Protocol, TypeAlias, cast

from fastavro import schemaless_reader, schemaless_writer
from pydantic import BaseModel, ValidationError

from runfacts.schemas import construct
from runfacts.schemas.binary.readers import Reader, Writer, compile_reader
from runfacts.schemas.binary.writers import compile_writer
from runfacts.schemas.catalog import (
    ID_FIELD,
    TYPE_FIELD,
    Catalog,
    SchemaEntry,
    default_catalog,
    envelope_prefix,
)
from runfacts.schemas.commands import COMMAND_CLASSES
from runfacts.schemas.common import CommandBase, CommandEnvelope, EventBase, EventEnvelope
from runfacts.schemas.errors import ConfigError, InvalidInput, RecordPosition
from runfacts.schemas.events import EVENT_CLASSES
from runfacts.schemas.upcasters import upcast

SINGLE_OBJECT_MARKER = b"\xc3\x01"
CONFLUENT_MAGIC = 0
Headers: TypeAlias = list[tuple[str, bytes]]
Model: TypeAlias = EventBase | CommandBase
Envelope: TypeAlias = EventEnvelope | CommandEnvelope


class SchemaIds(Protocol):
    """Maps catalog entries to registry schema ids and back (see `registry.RegistrySchemaIds`)."""

    def id_of(self, entry: SchemaEntry) -> int: ...

    def entry_of(self, schema_id: int) -> SchemaEntry | None: ...


@dataclass(frozen=True)
class CodecSettings:
    """How the codec frames and checks records."""

    validate: bool = True
    """Run pydantic validation when decoding; False trusts Avro-checked values (faster)."""
    confluent: bool = False
    """Encode in the Confluent wire format (needs a SchemaIds); decoding accepts both."""


@dataclass(frozen=True)
class _Plan:
    """Everything needed to read one writer version, computed once."""

    entry: SchemaEntry
    reader: dict[str, Any] | None
    envelope_reader: dict[str, Any] | None
    current: SchemaEntry
    model: type[BaseModel]
    build: Callable[[dict[str, Any]], Any]


class Codec:
    """Encodes and decodes every shipped event and command version."""

    def __init__(self, settings: CodecSettings | None = None, catalog: Catalog | None = None,
                 schema_ids: SchemaIds | None = None) -> None:
        self.settings = settings or CodecSettings()
        self.catalog = catalog or default_catalog()
        self.schema_ids = schema_ids
        if self.settings.confluent and schema_ids is None:
            raise ConfigError("CodecSettings.confluent", True, "needs a registry (SchemaIds)")
        self._plans = {e.fingerprint: _plan(self.catalog, e) for e in self.catalog.entries}
        self._framed = {SINGLE_OBJECT_MARKER + f: p for f, p in self._plans.items()}
        self._models = {cls: self.catalog.by_type[t] for t, cls in _classes().items()
                        if t in self.catalog.by_type}

    # -- encoding ---------------------------------------------------------------------------

    def encode(self, model: Model) -> bytes:
        """Framed bytes of a model under its current schema."""
        entry = self._entry_of(model)
        prefix = self._confluent_prefix(entry) if self.settings.confluent \
            else SINGLE_OBJECT_MARKER + entry.fingerprint
        return prefix + _model_body(entry, model)

    def encode_dict(self, values: dict[str, Any], version: int | None = None) -> bytes:
        """Framed bytes of a plain dict (its type field picks the schema; default: current)."""
        type_name = values.get("eventType", values.get("commandType"))
        try:
            entry = self.catalog.entry(str(type_name), version)
        except KeyError:
            raise InvalidInput(f"no shipped schema for type {type_name!r} "
                               f"version {version or 'current'}") from None
        return self._write(entry, values)

    def body(self, model: Model) -> bytes:
        """Canonical Avro body (no framing) under the model's current schema: hash this."""
        return _model_body(self._entry_of(model), model)

    def headers(self, model: Model) -> Headers:
        """Kafka headers: the type, schemaVersion and the event or command id."""
        entry = self._entry_of(model)
        values = model.__dict__
        return [(TYPE_FIELD[entry.kind], entry.type_name.encode()),
                ("schemaVersion", str(entry.version).encode()),
                (ID_FIELD[entry.kind], str(values[ID_FIELD[entry.kind]]).encode())]

    def _entry_of(self, model: Model) -> SchemaEntry:
        entry = self._models.get(type(model))
        if entry is None:
            raise InvalidInput(f"{type(model).__name__} is not a contract model")
        return entry

    def _write(self, entry: SchemaEntry, values: dict[str, Any]) -> bytes:
        out = io.BytesIO()
        if self.settings.confluent:
            out.write(self._confluent_prefix(entry))
        else:
            out.write(SINGLE_OBJECT_MARKER)
            out.write(entry.fingerprint)
        self._write_body(out, entry, values)
        return out.getvalue()

    def _write_body(self, out: io.BytesIO, entry: SchemaEntry, values: dict[str, Any]) -> None:
        try:
            schemaless_writer(out, entry.parsed, values)
        except (TypeError, ValueError, KeyError, AttributeError, OverflowError) as exc:
            raise InvalidInput(f"cannot encode: {exc}", schema=entry.fullname,
                               version=entry.version) from exc

    def _confluent_prefix(self, entry: SchemaEntry) -> bytes:
        assert self.schema_ids is not None  # checked in __init__
        return bytes([CONFLUENT_MAGIC]) + self.schema_ids.id_of(entry).to_bytes(4, "big")

    # -- decoding ---------------------------------------------------------------------------

    def decode(self, data: bytes, position: RecordPosition | None = None,
               headers: Headers | None = None) -> Model:
        """The current model of a framed record (old versions are upcast)."""
        plan, values = self._read(data, position, headers)
        try:
            if self.settings.validate:
                return plan.model.model_validate(values)  # type: ignore[return-value]
            built: Model = plan.build(values)
            return built
        except ValidationError as exc:
            raise _invalid(plan.current, position, f"validation failed: {_errors(exc)}") from exc

    def decode_dict(self, data: bytes, position: RecordPosition | None = None,
                    headers: Headers | None = None) -> dict[str, Any]:
        """The record as a plain dict in the current reader shape, upcast (fast path)."""
        return self._read(data, position, headers)[1]

    def decode_envelope(self, data: bytes, position: RecordPosition | None = None,
                        headers: Headers | None = None) -> Envelope:
        """Only the envelope (ids, type, time; schemaVersion as written): payload bytes unread."""
        plan, data, start = self._open(data, position, headers)
        if plan.envelope_reader is None:
            values = self._compiled(plan.entry, True, data, start, position)
        else:
            values = self._read_body(_stream(data, start), plan, plan.entry.envelope,
                                     plan.envelope_reader, position, whole=False)
        envelope = EventEnvelope if plan.entry.kind == "event" else CommandEnvelope
        if not self.settings.validate:
            built: Envelope = construct.build(envelope, values)
            return built
        try:
            return envelope.model_validate(values)
        except ValidationError as exc:
            raise _invalid(plan.entry, position, f"validation failed: {_errors(exc)}") from exc

    def _read(self, data: bytes, position: RecordPosition | None,
              headers: Headers | None) -> tuple[_Plan, dict[str, Any]]:
        plan, data, start = self._open(data, position, headers)
        if plan.reader is None:  # written with the current schema: the compiled reader
            return plan, self._compiled(plan.entry, False, data, start, position)
        values = self._read_body(_stream(data, start), plan, plan.entry.parsed, plan.reader,
                                 position)
        return plan, self._upcast(plan, values, position)

    def _open(self, data: bytes, position: RecordPosition | None,
              headers: Headers | None) -> tuple[_Plan, bytes, int]:
        """Check the framing and find the writer schema's plan: (plan, data, body start)."""
        if type(data) is not bytes:
            if not isinstance(data, bytes | bytearray | memoryview):
                raise _invalid(None, position, f"expected bytes, got {type(data).__name__}")
            data = bytes(data)
        plan = self._framed.get(data[:10])
        if plan is not None:
            return plan, data, 10
        if data[:2] == SINGLE_OBJECT_MARKER and len(data) >= 10:
            raise self._unknown(f"unknown fingerprint {data[2:10].hex()}", position, headers)
        if data[:1] == bytes([CONFLUENT_MAGIC]) and len(data) >= 5:
            return self._confluent_plan(data, position, headers), data, 5
        raise _invalid(None, position, f"not a runfacts record: {len(data)} bytes starting "
                       f"{bytes(data[:10]).hex() or '(empty)'} (want C3 01 + fingerprint)")

    def _confluent_plan(self, data: bytes, position: RecordPosition | None,
                        headers: Headers | None) -> _Plan:
        schema_id = int.from_bytes(data[1:5], "big")
        if self.schema_ids is None:
            raise _invalid(None, position, f"Confluent wire format (schema id {schema_id}) "
                           "but no schema registry is configured")
        entry = self.schema_ids.entry_of(schema_id)
        if entry is None:
            raise self._unknown(f"schema id {schema_id} is not a shipped runfacts schema",
                                position, headers)
        return self._plans[entry.fingerprint]

    def _compiled(self, entry: SchemaEntry, envelope: bool, data: bytes, start: int,
                  position: RecordPosition | None) -> dict[str, Any]:
        """Read a body written with the current schema through its generated reader."""
        read = _generated(entry, envelope)
        try:
            values, end = read(data, start)
        except Exception as exc:  # any failure to parse means bad input, as with fastavro
            raise _invalid(entry, position, f"cannot read body: {type(exc).__name__}: {exc}") \
                from exc
        if not envelope and end != len(data):
            raise _invalid(entry, position, f"{len(data) - end} trailing bytes after the record")
        _check_identity(entry, values, position)
        return values

    def _read_body(self, stream: io.BytesIO, plan: _Plan, writer: dict[str, Any],
                   reader: dict[str, Any] | None, position: RecordPosition | None,
                   whole: bool = True) -> dict[str, Any]:
        entry = plan.entry
        try:
            values = cast(dict[str, Any], schemaless_reader(stream, writer, reader))
        except Exception as exc:  # fastavro raises many types on bad bytes; all mean bad input
            raise _invalid(entry, position, f"cannot read body: {type(exc).__name__}: {exc}") \
                from exc
        if whole and stream.read(1):
            left = 1 + len(stream.read())
            raise _invalid(entry, position, f"{left} trailing bytes after the record")
        _check_identity(entry, values, position)
        return values

    def _upcast(self, plan: _Plan, values: dict[str, Any],
                position: RecordPosition | None) -> dict[str, Any]:
        try:
            return upcast(values, plan.current.type_name, plan.current.version)
        except Exception as exc:  # an upcaster choking on a value is bad input, not a crash
            raise _invalid(plan.entry, position, f"upcast to v{plan.current.version} failed: "
                           f"{type(exc).__name__}: {exc}") from exc

    def _unknown(self, what: str, position: RecordPosition | None,
                 headers: Headers | None) -> InvalidInput:
        """An unknown schema; says so plainly when the headers show a newer version."""
        hint = dict(headers or [])
        raw_type = hint.get("eventType") or hint.get("commandType") or b""
        type_name = raw_type.decode(errors="replace")
        version = _int(hint.get("schemaVersion"))
        current = self.catalog.by_type.get(type_name)
        if current is not None and version is not None and version > current.version:
            what = (f"schemaVersion {version} is newer than this code knows "
                    f"(newest v{current.version}); upgrade the reader ({what})")
        return InvalidInput(what, position=position,
                            schema=current.fullname if current else (type_name or None),
                            version=version)


def _plan(catalog: Catalog, entry: SchemaEntry) -> _Plan:
    current = catalog.current[entry.fullname]
    same = entry is current
    same_envelope = entry.envelope == current.envelope
    model = _classes()[current.type_name]
    return _Plan(entry, None if same else current.parsed,
                 None if same_envelope else current.envelope, current, model,
                 construct.builder(model))


_GENERATED: dict[tuple[bytes, bool], Reader] = {}
_WRITERS: dict[bytes, Writer] = {}


def _model_body(entry: SchemaEntry, model: Model) -> bytes:
    """A model's Avro body through its schema's generated writer (the bytes fastavro writes
    for `construct.dump(model)`; a model's fields already have the schema's types)."""
    write = _WRITERS.get(entry.fingerprint)
    if write is None:
        write = _WRITERS[entry.fingerprint] = compile_writer(entry.raw, attrs=True,
                                                             datetimes=True)
    try:
        return write(model)
    except (TypeError, ValueError, KeyError, AttributeError, OverflowError) as exc:
        raise InvalidInput(f"cannot encode: {type(exc).__name__}: {exc}", schema=entry.fullname,
                           version=entry.version) from exc


def _generated(entry: SchemaEntry, envelope: bool) -> Reader:
    """The generated reader of a schema (or of its envelope), compiled on first use and shared
    by every codec (same fingerprint, same bytes layout)."""
    key = (entry.fingerprint, envelope)
    read = _GENERATED.get(key)
    if read is None:
        schema = envelope_prefix(entry.raw) if envelope else entry.raw
        read = _GENERATED[key] = compile_reader(schema, datetimes=True)
    return read


@cache
def _classes() -> dict[str, type[BaseModel]]:
    return {**EVENT_CLASSES, **COMMAND_CLASSES}


def _stream(data: bytes | bytearray | memoryview, start: int) -> io.BytesIO:
    stream = io.BytesIO(data)
    stream.seek(start)
    return stream


def _check_identity(entry: SchemaEntry, values: dict[str, Any],
                    position: RecordPosition | None) -> None:
    """The type and version fields must agree with the writer schema."""
    type_name = values.get(TYPE_FIELD[entry.kind])
    if type_name != entry.type_name:
        raise _invalid(entry, position, f"{TYPE_FIELD[entry.kind]} {type_name!r} does not "
                       f"match the writer schema's {entry.type_name!r}")
    if values.get("schemaVersion") != entry.version:
        raise _invalid(entry, position, f"schemaVersion field {values.get('schemaVersion')} "
                       f"disagrees with the writer schema's version {entry.version}")


def _invalid(entry: SchemaEntry | None, position: RecordPosition | None,
             what: str) -> InvalidInput:
    return InvalidInput(what, position=position, schema=entry.fullname if entry else None,
                        version=entry.version if entry else None)


def _errors(exc: ValidationError) -> str:
    return "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors()[:5])


def _int(raw: bytes | None) -> int | None:
    try:
        return None if raw is None else int(raw)
    except ValueError:
        return None


@cache
def default_codec() -> Codec:
    """The process-wide codec: single-object framing, packaged catalog, validation on."""
    return Codec()


def encode(model: Model) -> bytes:
    """Single-object-encoded bytes of a model."""
    return default_codec().encode(model)


def headers(model: Model) -> Headers:
    """Kafka headers of a model."""
    return default_codec().headers(model)


def decode(data: bytes, position: RecordPosition | None = None,
           headers: Headers | None = None) -> Model:
    """The current model of a framed record."""
    return default_codec().decode(data, position, headers)


def decode_envelope(data: bytes, position: RecordPosition | None = None) -> Envelope:
    """Only the envelope of a framed record."""
    return default_codec().decode_envelope(data, position)


def canonical_body(model: Model) -> bytes:
    """Canonical Avro body of a model (for audit hashing)."""
    return default_codec().body(model)
