"""Schema-specialised Avro binary writers, generated once per schema (see `avrocode`).

A writer takes dicts, or (attrs) NamedTuples and models, and returns the Avro body; the
bytes equal fastavro's for every shipped schema (contract tests). Only `["null", T]` unions.
Pure.
"""

from __future__ import annotations

from typing import Any

from runfacts.schemas.binary.readers import Writer, _Gen
from runfacts.schemas.binary.varint import CACHED, write_long


def compile_writer(schema: dict[str, Any], attrs: bool = False, datetimes: bool = False) -> Writer:
    """`write(value) -> bytes` for values of `schema`: dicts, or (attrs) NamedTuples/objects.

    `datetimes`: timestamp-millis values are aware datetimes (as fastavro writes them: whole
    milliseconds since the epoch, rounded down); default: int ms. Values are not validated
    beyond what writing needs: give it values of the schema's types (a model's fields)."""
    gen = _WriteGen(schema)
    gen.attrs = attrs
    gen.datetimes = datetimes
    gen.line(1, "parts = []")
    gen.line(1, "add = parts.append")
    gen.write(schema, gen.namespace(schema), "value", 1)
    gen.line(1, "return b''.join(parts)")
    return gen.build("def write(value):", "write")


class _WriteGen(_Gen):
    """Emits the source of one writer function."""

    def write(self, node: Any, ns: str, source: str, ind: int) -> None:
        self.emit("write", node, ns, source, ind)

    def _write_null(self, node: Any, ns: str, source: str, ind: int) -> None:
        self.line(ind, "pass")

    def _write_boolean(self, node: Any, ns: str, source: str, ind: int) -> None:
        self.line(ind, f"add(b'\\x01' if {source} else b'\\x00')")

    def _write_long(self, node: Any, ns: str, source: str, ind: int) -> None:
        number = self.var("num")
        if self.datetimes and isinstance(node, dict) and \
                node.get("logicalType") == "timestamp-millis":
            source = f"({source} - EPOCH) // MILLISECOND"
        self.line(ind, f"{number} = {source}")
        self.line(ind, f"add(VARINTS[{number}] if 0 <= {number} < {CACHED} "
                       f"else encode_long({number}))")

    _write_int = _write_long

    def _write_float(self, node: Any, ns: str, source: str, ind: int) -> None:
        self.line(ind, f"add(pack('<f', {source}))")

    def _write_double(self, node: Any, ns: str, source: str, ind: int) -> None:
        self.line(ind, f"add(pack('<d', {source}))")

    def _write_bytes(self, node: Any, ns: str, source: str, ind: int, encode: str = "") -> None:
        data = self.var("data")
        self.line(ind, f"{data} = {source}{encode}")
        self.line(ind, f"n = len({data})")
        self.line(ind, f"add(VARINTS[n] if n < {CACHED} else encode_long(n))")
        self.line(ind, f"add({data})")

    def _write_string(self, node: Any, ns: str, source: str, ind: int) -> None:
        self._write_bytes(node, ns, source, ind, ".encode()")

    def _write_enum(self, node: Any, ns: str, source: str, ind: int) -> None:
        index = self.const({s: write_long(i) for i, s in enumerate(node["symbols"])})
        self.line(ind, f"add({index}[{source}])")

    def _write_union(self, node: Any, ns: str, source: str, ind: int) -> None:
        if len(node) != 2 or node[0] != "null":
            raise ValueError(f"avrocode writes only ['null', T] unions, not {node!r}")
        value = self.var("opt")
        self.line(ind, f"{value} = {source}")
        self.line(ind, f"if {value} is None:")
        self.line(ind + 1, "add(b'\\x00')")
        self.line(ind, "else:")
        self.line(ind + 1, "add(b'\\x02')")
        self.write(node[1], ns, value, ind + 1)

    def _write_array(self, node: Any, ns: str, source: str, ind: int) -> None:
        items, item = self.var("items"), self.var("item")
        self.line(ind, f"{items} = {source}")
        self.line(ind, f"if {items}:")
        self.line(ind + 1, f"add(write_long(len({items})))")
        self.line(ind + 1, f"for {item} in {items}:")
        self.write(node["items"], ns, item, ind + 2)
        self.line(ind, "add(b'\\x00')")

    def _write_map(self, node: Any, ns: str, source: str, ind: int) -> None:
        items, key, item = self.var("items"), self.var("key"), self.var("item")
        self.line(ind, f"{items} = {source}")
        self.line(ind, f"if {items}:")
        self.line(ind + 1, f"add(write_long(len({items})))")
        self.line(ind + 1, f"for {key}, {item} in {items}.items():")
        self._write_string(None, ns, key, ind + 2)
        self.write(node["values"], ns, item, ind + 2)
        self.line(ind, "add(b'\\x00')")

    def _write_record(self, node: Any, ns: str, source: str, ind: int) -> None:
        record = self.var("rec")
        self.line(ind, f"{record} = {source}")
        for field in node["fields"]:
            name = field["name"]
            self.write(field["type"], ns, f"{record}.{name}" if self.attrs else f"{record}[{name!r}]",
                       ind)
