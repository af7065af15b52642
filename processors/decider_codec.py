"""The run decider's hot-path codec: compiled Avro for the commands it reads and events it writes.

Byte for byte and value for value what `runfacts.schemas.codec.Codec` does (contract tests
hold every event and command type to it): the same framing, the same Avro body, the same
pydantic validation of every command. Only the Avro work is compiled once per schema
(`runfacts.projections.avrocode`), which is several times faster than fastavro's per-call
setup for records this small. Whatever the compiled path does not handle — an older writer
version (upcasting), the Confluent framing on input, bytes it cannot read, a value it cannot
write — goes to the Codec itself, which also names what is wrong, so errors read the same.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any, NamedTuple

from pydantic import BaseModel, ValidationError

from runfacts.projections.avrocode import Writer, _Gen
from runfacts.schemas.catalog import ID_FIELD, TYPE_FIELD, SchemaEntry
from runfacts.schemas.codec import SINGLE_OBJECT_MARKER, Codec, Headers, Model, _classes
from runfacts.schemas.errors import RecordPosition

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_TIMESTAMP_MILLIS = "timestamp-millis"


def write_varlong(n: int) -> bytes:
    """The zig-zag varint of `n`; straight-line for the 6-byte epoch-millisecond timestamps."""
    z = (n << 1) ^ (n >> 63)
    if z < 0x80:
        return _ONE_BYTE[z]
    if 1 << 35 <= z < 1 << 42:
        return bytes((z & 0x7F | 0x80, z >> 7 & 0x7F | 0x80, z >> 14 & 0x7F | 0x80,
                      z >> 21 & 0x7F | 0x80, z >> 28 & 0x7F | 0x80, z >> 35))
    out = bytearray()
    while z > 0x7F:
        out.append(z & 0x7F | 0x80)
        z >>= 7
    out.append(z)
    return bytes(out)


_ONE_BYTE = [bytes((z,)) for z in range(0x80)]


def to_millis(value: Any) -> int:
    """fastavro's timestamp-millis conversion of an aware datetime (ints pass through)."""
    if type(value) is int:
        return value
    if value.tzinfo is None:  # fastavro would use the local zone: leave that to it
        raise TypeError("naive datetime")
    delta = value - EPOCH
    return (delta.days * 86_400 + delta.seconds) * 1000 + int(delta.microseconds / 1000)


def from_millis(value: int) -> datetime:
    """fastavro's timestamp-millis reading: an aware UTC datetime."""
    return EPOCH + timedelta(microseconds=value * 1000)


def _logical(node: Any) -> str | None:
    return node.get("logicalType") if isinstance(node, dict) else None


class _ModelGen(_Gen):
    """avrocode with timestamp-millis as datetimes, like fastavro's readers and writers; readers
    also report the longest text (UTF-8 bytes) and the longest array they met."""

    def __init__(self, schema: dict[str, Any]) -> None:
        super().__init__(schema)
        self.consts.update(to_millis=to_millis, from_millis=from_millis, write_long=write_varlong)

    def _read_bytes(self, node: Any, ns: str, target: str, ind: int, decode: str = "") -> None:
        super()._read_bytes(node, ns, target, ind, decode)
        self.line(ind, "if n > longest:")
        self.line(ind + 1, "longest = n")

    def _read_array(self, node: Any, ns: str, target: str, ind: int) -> None:
        super()._read_array(node, ns, target, ind)
        self.line(ind, f"if len({target}) > most:")
        self.line(ind + 1, f"most = len({target})")

    def _read_boolean(self, node: Any, ns: str, target: str, ind: int) -> None:
        self.line(ind, f"{target} = buf[pos] != 0")  # fastavro: any non-zero byte is true
        self.line(ind, "pos += 1")

    def _read_long(self, node: Any, ns: str, target: str, ind: int) -> None:
        super()._read_long(node, ns, target, ind)
        if _logical(node) == _TIMESTAMP_MILLIS:
            self.line(ind, f"{target} = from_millis({target})")

    def _write_long(self, node: Any, ns: str, source: str, ind: int) -> None:
        if _logical(node) == _TIMESTAMP_MILLIS:
            source = f"to_millis({source})"
        super()._write_long(node, ns, source, ind)


def compile_model_reader(schema: dict[str, Any]) -> SizedReader:
    """`read(buf, pos) -> (dict, end, longest text bytes, longest array)`; the dict is what
    fastavro's schemaless_reader builds."""
    gen = _ModelGen(schema)
    gen.line(1, "pos = start")
    gen.line(1, "longest = most = 0")
    gen.read(schema, gen.namespace(schema), "value", 1)
    gen.line(1, "return value, pos, longest, most")
    return gen.build("def read(buf, start):", "read")


def compile_model_writer(schema: dict[str, Any]) -> Writer:
    """`write(model) -> body` for a contract model (fields read as attributes)."""
    gen = _ModelGen(schema)
    gen.attrs = True
    gen.line(1, "parts = []")
    gen.line(1, "add = parts.append")
    gen.write(schema, gen.namespace(schema), "value", 1)
    gen.line(1, "return b''.join(parts)")
    return gen.build("def write(value):", "write")


SizedReader = Callable[[bytes, int], tuple[dict[str, Any], int, int, int]]


class Extent(NamedTuple):
    """The longest text (in UTF-8 bytes, so at least its characters) and array of a record."""

    text_bytes: int
    items: int


class _Reading(NamedTuple):
    entry: SchemaEntry
    model: type[BaseModel]
    read: SizedReader


class _Writing(NamedTuple):
    prefix: bytes
    write: Writer
    type_header: tuple[str, bytes]
    version_header: tuple[str, bytes]
    id_field: str


class DeciderCodec:
    """Commands in, events out, as `codec` would; compiled readers/writers built on first use."""

    def __init__(self, codec: Codec) -> None:
        self.codec = codec
        self._validate = codec.settings.validate
        self._readers: dict[bytes, _Reading | None] = {}
        self._writers: dict[type, _Writing | None] = {}

    def decode(self, data: bytes, position: RecordPosition | None = None,
               headers: Headers | None = None) -> Model:
        """`Codec.decode` (the same model, or the same InvalidInput)."""
        return self.decode_sized(data, position, headers)[0]

    def decode_sized(self, data: bytes, position: RecordPosition | None = None,
                     headers: Headers | None = None) -> tuple[Model, Extent | None]:
        """`decode`, and the record's `Extent` when the compiled reader read it (else None)."""
        fingerprint = data[2:10] if type(data) is bytes and data[:2] == SINGLE_OBJECT_MARKER else b""
        plan = self._readers.get(fingerprint, False)
        if plan is False:
            plan = self._reading(fingerprint)
            if fingerprint in self.codec.catalog.by_fingerprint:  # never grow on made-up ones
                self._readers[fingerprint] = plan
        if plan is not None:
            found = self._fast_decode(plan, data)
            if found is not None:
                return found
        return self.codec.decode(data, position, headers), None

    def _fast_decode(self, plan: _Reading, data: bytes) -> tuple[Model, Extent] | None:
        """The model, or None when anything is off (the Codec then decides and explains)."""
        try:
            values, end, longest, most = plan.read(data, 10)
        except Exception:  # bad bytes: the Codec's reader names the problem
            return None
        entry = plan.entry
        if end != len(data) or values.get(TYPE_FIELD[entry.kind]) != entry.type_name \
                or values.get("schemaVersion") != entry.version or not self._validate:
            return None
        try:
            return plan.model.model_validate(values), Extent(longest, most)  # type: ignore[return-value]
        except ValidationError:
            return None

    def _reading(self, fingerprint: bytes) -> _Reading | None:
        """A compiled plan for current-version writers; None sends the record to the Codec."""
        entry = self.codec.catalog.by_fingerprint.get(bytes(fingerprint)) if fingerprint else None
        if entry is None or self.codec.catalog.current[entry.fullname] is not entry:
            return None
        return _Reading(entry, _classes()[entry.type_name], compile_model_reader(entry.raw))

    def encode(self, model: Model) -> bytes:
        """`Codec.encode`: framed bytes of the model under its current schema."""
        plan = self._writing(type(model))
        if plan is not None:
            try:
                return plan.prefix + plan.write(model)
            except Exception:  # a value the compiled writer cannot take: the Codec explains
                pass
        return self.codec.encode(model)

    def headers(self, model: Model) -> Headers:
        """`Codec.headers`: type, schemaVersion and id."""
        plan = self._writing(type(model))
        if plan is None:
            return self.codec.headers(model)
        return [plan.type_header, plan.version_header,
                (plan.id_field, str(model.__dict__[plan.id_field]).encode())]

    def _writing(self, cls: type) -> _Writing | None:
        plan = self._writers.get(cls, False)
        if plan is False:
            plan = self._writers[cls] = self._compile_writer(cls)
        return plan

    def _compile_writer(self, cls: type) -> _Writing | None:
        entry = self.codec._models.get(cls)
        if entry is None:
            return None
        codec = self.codec
        prefix = (codec._confluent_prefix(entry) if codec.settings.confluent
                  else SINGLE_OBJECT_MARKER + entry.fingerprint)
        return _Writing(prefix, compile_model_writer(entry.raw),
                        (TYPE_FIELD[entry.kind], entry.type_name.encode()),
                        ("schemaVersion", str(entry.version).encode()), ID_FIELD[entry.kind])
