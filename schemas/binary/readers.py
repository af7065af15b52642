"""Schema-specialised Avro binary readers, generated once per schema (writers: `avrowriter`).

fastavro spends most of a small record's time in per-call setup; a replay reads millions
of small records and the codec decodes every record a worker takes in, so each schema is
compiled into one straight-line Python function (two to three times as fast). Values follow
the Avro binary encoding; `timestamp-millis` stays an int (epoch milliseconds), so reducers
see plain, deterministic values, unless the codec asks for datetimes (as fastavro gives).
Lengths are checked once per record (the position only grows), field selections skip what
a reader does not need, and known fields (type, version) are compared as bytes. Contract
tests check readers and writers against fastavro for every shipped schema. Pure: bytes in,
values out; no I/O.

Supported types: null, boolean, int, long, float, double, string, bytes, enum, array,
map, record, unions (writers: only `["null", T]`), named references. Bad bytes raise
`AvroDecodeError` naming what failed (or IndexError, UnicodeDecodeError, … from the generated
code: callers treat any exception as bad bytes).
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Mapping
from datetime import UTC, datetime, timedelta
from typing import Any

from runfacts.schemas.binary.varint import (
    CACHED,
    SHORT,
    VARINTS,
    ZIGZAG,
    AvroDecodeError,
    encode_long,
    read_long,
    skip_long,
    write_long,
    write_string,
)

Reader = Callable[[bytes, int], tuple[Any, int]]
Writer = Callable[[Any], bytes]

_PRIMITIVE = ("null", "boolean", "int", "long", "float", "double", "string", "bytes")
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
__all__ = ["CACHED", "SHORT", "AvroDecodeError", "Keep", "Reader", "Writer", "checked",
           "compile_reader", "read_long", "skip_long", "write_long", "write_string"]


Keep = dict[str, "Keep | None"]
"""Which fields of a record to build (None: all); others are skipped, absent from the dict."""


def compile_reader(schema: dict[str, Any], keep: Keep | None = None, *,
                   expect: Mapping[str, str | int] | None = None, exact: bool = False,
                   datetimes: bool = False) -> Reader:
    """`read(buf, pos) -> (value, end)` for records written with `schema` (only `keep`).

    `expect`: top-level string/int fields whose value is known (a type tag, a version): their
    bytes are compared, not decoded, and a mismatch raises. `exact`: the record must end the
    buffer (else AvroDecodeError); otherwise it only must not run past it. `datetimes`:
    timestamp-millis values as aware UTC datetimes, as fastavro reads them (default: int ms)."""
    gen = _Gen(schema)
    gen.selection = keep
    gen.datetimes = datetimes
    gen.expect = dict(expect or {})
    gen.line(1, "pos = start")
    gen.read(schema, gen.namespace(schema), "value", 1)
    if exact:
        gen.line(1, "if pos != len(buf):")
        gen.line(2, "raise AvroDecodeError(f'{len(buf) - pos} bytes left after the record' "
                    "if pos < len(buf) else 'truncated record')")
    else:
        gen.line(1, "if pos > len(buf):")  # lengths are checked once, here: pos only grows
        gen.line(2, "raise AvroDecodeError('truncated record')")
    gen.line(1, "return value, pos")
    return gen.build("def read(buf, start):", "read")


def checked(reader: Reader, what: str) -> Callable[[bytes, int], Any]:
    """`reader` that must consume the buffer exactly, raising AvroDecodeError otherwise."""

    def read(buf: bytes, start: int = 0) -> Any:
        try:
            value, end = reader(buf, start)
        except AvroDecodeError as exc:
            raise AvroDecodeError(f"{what}: {exc}") from exc
        except (IndexError, KeyError, UnicodeDecodeError, struct.error, TypeError) as exc:
            raise AvroDecodeError(f"{what}: {type(exc).__name__}: {exc}") from exc
        if end != len(buf):
            raise AvroDecodeError(f"{what}: {len(buf) - end} bytes left after the record"
                                  if end < len(buf) else f"{what}: truncated record")
        return value

    return read


class _Gen:
    """Emits the source of one reader function (base of the writer's and the audit's)."""

    def __init__(self, schema: dict[str, Any]) -> None:
        self.lines: list[str] = []
        self.consts: dict[str, Any] = {"read_long": read_long, "write_long": write_long,
                                       "AvroDecodeError": AvroDecodeError,
                                       "SHORT": SHORT, "skip_long": skip_long,
                                       "VARINTS": VARINTS, "encode_long": encode_long,
                                       "ZIGZAG": ZIGZAG,
                                       "unpack_from": struct.unpack_from, "pack": struct.pack,
                                       "EPOCH": EPOCH, "timedelta": timedelta,
                                       "MILLISECOND": timedelta(milliseconds=1)}
        self.named: dict[str, Any] = {}
        self.active: set[str] = set()
        self.counter = 0
        self.attrs = False
        self.selection: Keep | None = None
        self.datetimes = False
        self.longest_text = False  # also track `longest`: the most bytes of one string/bytes
        self.expect: dict[str, str | int] = {}

    def namespace(self, schema: dict[str, Any]) -> str:
        return str(schema.get("namespace", ""))

    def line(self, indent: int, text: str) -> None:
        self.lines.append("    " * indent + text)

    def var(self, stem: str) -> str:
        self.counter += 1
        return f"{stem}_{self.counter}"

    def const(self, value: Any) -> str:
        name = self.var("K")
        self.consts[name] = value
        return name

    def build(self, header: str, name: str) -> Callable[..., Any]:
        source = "\n".join([header, *self.lines])
        scope = dict(self.consts)
        exec(compile(source, f"<avrocode {name}>", "exec"), scope)  # noqa: S102 - generated here
        return scope[name]  # type: ignore[no-any-return]

    def resolve(self, node: Any, ns: str) -> tuple[Any, str]:
        """(definition, namespace) of a type node; registers named definitions."""
        if isinstance(node, str) and node not in _PRIMITIVE:
            fullname = node if "." in node else f"{ns}.{node}"
            if fullname not in self.named:
                raise ValueError(f"unknown named type {fullname!r}")
            return self.named[fullname], fullname.rsplit(".", 1)[0]
        if isinstance(node, dict) and node.get("type") in ("record", "enum", "fixed"):
            ns = node.get("namespace", ns)
            fullname = node["name"] if "." in node["name"] else f"{ns}.{node['name']}"
            self.named[fullname] = node
        return node, ns

    # -- reading ----------------------------------------------------------------------------

    def emit(self, verb: str, node: Any, ns: str, name: str, ind: int) -> None:
        """Emit the code that does `verb` ("read" or "write") for a type node, through the
        `_<verb>_<avro type>` method of this generator."""
        node, ns = self.resolve(node, ns)
        kind = node if isinstance(node, str) else ("union" if isinstance(node, list)
                                                   else node["type"])
        if isinstance(kind, dict | list):
            return self.emit(verb, kind, ns, name, ind)
        method = getattr(self, f"_{verb}_{kind}", None)
        if method is None:
            raise ValueError(f"avrocode cannot {verb} Avro type {kind!r}")
        method(node, ns, name, ind)

    def read(self, node: Any, ns: str, target: str, ind: int) -> None:
        self.emit("read", node, ns, target, ind)

    def _read_null(self, node: Any, ns: str, target: str, ind: int) -> None:
        self.line(ind, f"{target} = None")

    def _read_boolean(self, node: Any, ns: str, target: str, ind: int) -> None:
        self.line(ind, f"{target} = buf[pos] != 0")  # as fastavro reads it
        self.line(ind, "pos += 1")

    def _read_long(self, node: Any, ns: str, target: str, ind: int) -> None:
        self.line(ind, "b = buf[pos]")
        self.line(ind, "if b < 0x80:")
        self.line(ind + 1, f"{target} = ZIGZAG[b]")
        self.line(ind + 1, "pos += 1")
        self.line(ind, "else:")
        self.line(ind + 1, f"{target}, pos = read_long(buf, pos)")
        if self.datetimes and isinstance(node, dict) and \
                node.get("logicalType") == "timestamp-millis":
            self.line(ind, f"{target} = EPOCH + timedelta(microseconds={target} * 1000)")

    _read_int = _read_long

    def _read_float(self, node: Any, ns: str, target: str, ind: int) -> None:
        self.line(ind, f"{target} = unpack_from('<f', buf, pos)[0]")
        self.line(ind, "pos += 4")

    def _read_double(self, node: Any, ns: str, target: str, ind: int) -> None:
        self.line(ind, f"{target} = unpack_from('<d', buf, pos)[0]")
        self.line(ind, "pos += 8")

    def _read_bytes(self, node: Any, ns: str, target: str, ind: int, decode: str = "") -> None:
        """A length and its bytes; an overrun shows as pos > len(buf) (checked at the end)."""
        self.line(ind, "k = SHORT[buf[pos]]")
        self.line(ind, "if k:")
        self.line(ind + 1, "end = pos + k")
        if self.longest_text:
            self.line(ind + 1, "n = k - 1")
        self.line(ind + 1, f"{target} = buf[pos + 1:end]{decode}")
        self.line(ind, "else:")
        self._long_length(ind + 1)
        self.line(ind + 1, f"{target} = buf[pos:end]{decode}")
        self.line(ind, "pos = end")
        if self.longest_text:  # `n`: this string's length, set on both paths above
            self.line(ind, "if n > longest:")
            self.line(ind + 1, "longest = n")

    def _long_length(self, ind: int) -> None:
        """A length over one byte (two inline: 64 to 8191): sets `n` and `end`, moves `pos`
        to the data; a negative length is bad input."""
        self.line(ind, "n = buf[pos]")
        self.line(ind, "b = buf[pos + 1]")
        self.line(ind, "if n & 0x81 == 0x80 and b < 0x80:")
        self.line(ind + 1, "n = ((n & 0x7F) | b << 7) >> 1")
        self.line(ind + 1, "pos += 2")
        self.line(ind, "else:")
        self.line(ind + 1, "n, pos = read_long(buf, pos)")
        self.line(ind + 1, "if n < 0:")
        self.line(ind + 2, "raise AvroDecodeError(f'bad length {n} at {pos}')")
        self.line(ind, "end = pos + n")

    def _read_string(self, node: Any, ns: str, target: str, ind: int) -> None:
        self._read_bytes(node, ns, target, ind, ".decode()")

    def _read_enum(self, node: Any, ns: str, target: str, ind: int) -> None:
        symbols = self.const(tuple(node["symbols"]))
        self._read_long(node, ns, "i", ind)
        self.line(ind, f"{target} = {symbols}[i]")

    def _union_index(self, ind: int) -> None:
        """Sets `i` to the branch index's zig-zag code (2 * index; -1 when negative)."""
        self.line(ind, "i = buf[pos]")
        self.line(ind, "if i < 0x80:")
        self.line(ind + 1, "pos += 1")
        self.line(ind, "else:")
        self.line(ind + 1, "i, pos = read_long(buf, pos)")
        self.line(ind + 1, "i = 2 * i if i >= 0 else -1")

    def _union_branches(self, node: list[Any], ind: int, each: Callable[[Any, int], None]) -> None:
        self._union_index(ind)
        for index, branch in enumerate(node):
            self.line(ind, f"{'if' if index == 0 else 'elif'} i == {2 * index}:")
            each(branch, ind + 1)
        self.line(ind, "else:")
        self.line(ind + 1, "raise AvroDecodeError(f'union index {i >> 1} out of range')")

    def _read_union(self, node: Any, ns: str, target: str, ind: int) -> None:
        self._union_branches(node, ind, lambda branch, i: self.read(branch, ns, target, i))

    def _read_blocks(self, ind: int, each: Callable[[int], None]) -> None:
        count = self.var("count")
        self.line(ind, "while True:")
        self._read_long(None, "", count, ind + 1)
        self.line(ind + 1, f"if {count} == 0:")
        self.line(ind + 2, "break")
        self.line(ind + 1, f"if {count} < 0:")
        self.line(ind + 2, f"{count} = -{count}")
        self._read_long(None, "", "_size", ind + 2)
        self.line(ind + 1, f"for _ in range({count}):")
        each(ind + 2)

    def _read_array(self, node: Any, ns: str, target: str, ind: int) -> None:
        item = self.var("item")
        self.line(ind, f"{target} = []")

        def each(i: int) -> None:
            self.read(node["items"], ns, item, i)
            self.line(i, f"{target}.append({item})")

        self._read_blocks(ind, each)

    def _read_map(self, node: Any, ns: str, target: str, ind: int) -> None:
        key, item = self.var("key"), self.var("item")
        self.line(ind, f"{target} = {{}}")

        def each(i: int) -> None:
            self._read_string(None, ns, key, i)
            self.read(node["values"], ns, item, i)
            self.line(i, f"{target}[{key}] = {item}")

        self._read_blocks(ind, each)

    def _read_record(self, node: Any, ns: str, target: str, ind: int) -> None:
        fullname = f"{ns}.{node['name']}" if "." not in node["name"] else node["name"]
        if fullname in self.active:
            raise ValueError(f"avrocode does not support recursive type {fullname}")
        self.active.add(fullname)
        keep, self.selection = self.selection, None
        expect, self.expect = self.expect, {}  # the top-level record's only
        names = []
        for field in node["fields"]:
            if field["name"] in expect:
                local = self._expected(field, expect[field["name"]], ind)
                if keep is None or field["name"] in keep:
                    names.append(f"{field['name']!r}: {local}")
                continue
            if keep is not None and field["name"] not in keep:
                self.skip(field["type"], ns, ind)
                continue
            local = self.var("f")
            self.selection = None if keep is None else keep[field["name"]]
            self.read(field["type"], ns, local, ind)
            self.selection = None
            names.append(f"{field['name']!r}: {local}")
        self.active.discard(fullname)
        self.line(ind, f"{target} = {{{', '.join(names)}}}")

    def _expected(self, field: dict[str, Any], value: str | int, ind: int) -> str:
        """Compare a field's bytes with the encoding of its known value; the value's name."""
        kind = field["type"]
        if kind not in ("string", "int", "long"):
            raise ValueError(f"avrocode expects only string/int/long fields, not {kind!r}")
        encoded = write_string(str(value)) if kind == "string" else write_long(int(value))
        raw = self.const(encoded)
        self.line(ind, f"if buf[pos:pos + {len(encoded)}] != {raw}:")
        self.line(ind + 1, f"raise AvroDecodeError({field['name'] + ' is not ' + repr(value)!r} "
                           "' as the writer schema says')")
        self.line(ind, f"pos += {len(encoded)}")
        return self.const(value)

    # -- skipping ---------------------------------------------------------------------------

    def skip(self, node: Any, ns: str, ind: int) -> None:
        """Emit code that moves `pos` past a value without building it."""
        node, ns = self.resolve(node, ns)
        kind = node if isinstance(node, str) else ("union" if isinstance(node, list)
                                                   else node["type"])
        if isinstance(kind, dict | list):
            return self.skip(kind, ns, ind)
        if kind in ("string", "bytes"):
            self.line(ind, "k = SHORT[buf[pos]]")
            self.line(ind, "if k:")
            self.line(ind + 1, "pos += k")
            self.line(ind, "else:")
            self._long_length(ind + 1)
            self.line(ind + 1, "pos = end")
        elif kind in ("int", "long", "enum"):
            self.line(ind, "if buf[pos] < 0x80:")
            self.line(ind + 1, "pos += 1")
            self.line(ind, "else:")
            self.line(ind + 1, "pos = skip_long(buf, pos)")
        elif kind == "union":
            self._union_branches(node, ind, lambda branch, i: self.skip(branch, ns, i))
        elif kind == "record":
            for field in node["fields"]:
                self.skip(field["type"], ns, ind)
        elif kind == "null":
            self.line(ind, "pass")
        else:
            self.read(node, ns, self.var("skipped"), ind)
