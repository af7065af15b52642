"""The run decider's command reader: the codec's decode, plus how long the record's texts and
arrays are, so the shell's input limits need no second walk over the model.

Value for value what `runfacts.schemas.codec.Codec` does (contract tests hold every command
type to it): the same framing, the same pydantic validation. The Avro work is a reader
compiled once per schema (`runfacts.schemas.binary.readers`) that also reports the longest text and
array it met. Whatever it does not handle — an older writer version (upcasting), the
Confluent framing, bytes it cannot read — goes to the Codec, which names what is wrong, so
errors read the same. Events are encoded by the Codec itself (its writers are compiled too).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Literal, NamedTuple

from pydantic import BaseModel, ValidationError

from runfacts.schemas.binary.readers import _Gen
from runfacts.schemas.catalog import TYPE_FIELD, SchemaEntry
from runfacts.schemas.codec import SINGLE_OBJECT_MARKER, Codec, Headers, Model, _classes
from runfacts.schemas.errors import RecordPosition


class _ModelGen(_Gen):
    """avrocode reading timestamp-millis as datetimes, like fastavro, and reporting the longest
    text (UTF-8 bytes) and the longest array it met."""

    def __init__(self, schema: dict[str, Any]) -> None:
        super().__init__(schema)
        self.datetimes = True
        self.longest_text = True

    def _read_array(self, node: Any, ns: str, target: str, ind: int) -> None:
        super()._read_array(node, ns, target, ind)
        self.line(ind, f"if len({target}) > most:")
        self.line(ind + 1, f"most = len({target})")


def compile_model_reader(schema: dict[str, Any]) -> SizedReader:
    """`read(buf, pos) -> (dict, end, longest text bytes, longest array)`; the dict is what
    fastavro's schemaless_reader builds."""
    gen = _ModelGen(schema)
    gen.line(1, "pos = start")
    gen.line(1, "longest = most = 0")
    gen.read(schema, gen.namespace(schema), "value", 1)
    gen.line(1, "return value, pos, longest, most")
    return gen.build("def read(buf, start):", "read")


SizedReader = Callable[[bytes, int], tuple[dict[str, Any], int, int, int]]


class Extent(NamedTuple):
    """The longest text (in UTF-8 bytes, so at least its characters) and array of a record."""

    text_bytes: int
    items: int


class _Reading(NamedTuple):
    entry: SchemaEntry
    model: type[BaseModel]
    read: SizedReader


class DeciderCodec:
    """Commands in, events out, as `codec` would; compiled readers built on first use."""

    def __init__(self, codec: Codec) -> None:
        self.codec = codec
        self._validate = codec.settings.validate
        self._readers: dict[bytes, _Reading | None] = {}

    def decode(self, data: bytes, position: RecordPosition | None = None,
               headers: Headers | None = None) -> Model:
        """`Codec.decode` (the same model, or the same InvalidInput)."""
        return self.decode_sized(data, position, headers)[0]

    def decode_sized(self, data: bytes, position: RecordPosition | None = None,
                     headers: Headers | None = None) -> tuple[Model, Extent | None]:
        """`decode`, and the record's `Extent` when the compiled reader read it (else None)."""
        fingerprint = data[2:10] if type(data) is bytes and data[:2] == SINGLE_OBJECT_MARKER else b""
        plan: _Reading | None | Literal[False] = self._readers.get(fingerprint, False)
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
        """`Codec.encode` (compiled there)."""
        return self.codec.encode(model)

    def headers(self, model: Model) -> Headers:
        """`Codec.headers`: type, schemaVersion and id."""
        return self.codec.headers(model)
