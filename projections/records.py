"""The projections' own wire schemas (`schemas/avro/projections/<Name>.v<N>.avsc`) and framing.

Projection records use the contract's framing: Avro single-object encoding (C3 01, the
schema's CRC-64-AVRO fingerprint, the body), so a consumer tells a projection record and
its version from its first ten bytes. The files ship with `runfacts.schemas` as package
data but live apart from the event/command catalog: they are outputs, never decider input.
Readers/writers are compiled once per schema (`avrocode`); timestamps are epoch ms.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cache
from importlib import resources
from typing import Any

from runfacts.schemas.binary.readers import Reader, Writer, checked, compile_reader
from runfacts.schemas.binary.writers import compile_writer
from runfacts.schemas.catalog import fingerprint_of
from runfacts.schemas.errors import InvalidInput

MARKER = b"\xc3\x01"
FOLDER = "projections"


@dataclass(frozen=True)
class ProjectionSchema:
    """One shipped projection schema version, compiled."""

    name: str
    version: int
    raw: dict[str, Any] = field(repr=False)
    fingerprint: bytes
    write: Writer = field(repr=False)
    write_attrs: Writer = field(repr=False)
    read: Callable[[bytes, int], Any] = field(repr=False)

    @property
    def fullname(self) -> str:
        return f"{self.raw['namespace']}.{self.raw['name']}"

    def prefix(self) -> bytes:
        """The single-object header of this schema's records."""
        return MARKER + self.fingerprint

    def frame(self, body: bytes) -> bytes:
        """Framed bytes of an already encoded body."""
        return MARKER + self.fingerprint + body

    def encode(self, value: Any) -> bytes:
        """Framed bytes of a value (dict, or NamedTuple when it has attributes)."""
        write = self.write if isinstance(value, dict) else self.write_attrs
        return self.frame(write(value))

    def decode(self, data: bytes) -> dict[str, Any]:
        """The dict of framed bytes of this schema; InvalidInput otherwise."""
        if data[:10] != self.prefix():
            raise InvalidInput(f"not a {self.fullname} v{self.version} record: starts "
                               f"{bytes(data[:10]).hex()}", schema=self.fullname,
                               version=self.version)
        try:
            value: dict[str, Any] = self.read(data, 10)
        except ValueError as exc:
            raise InvalidInput(str(exc), schema=self.fullname, version=self.version) from exc
        return value


def load(name: str, version: int = 1) -> ProjectionSchema:
    """A shipped projection schema, e.g. load("AuditRecord")."""
    return _load(name, version)


@cache
def _load(name: str, version: int) -> ProjectionSchema:
    folder = resources.files("runfacts.schemas").joinpath("avro", FOLDER)
    file = folder.joinpath(f"{name}.v{version}.avsc")
    if not file.is_file():
        raise KeyError(f"no projection schema {name} v{version} under avro/{FOLDER}/")
    raw = json.loads(file.read_text(encoding="utf-8"))
    reader: Reader = compile_reader(raw)
    return ProjectionSchema(name, version, raw, fingerprint_of(raw), compile_writer(raw),
                            compile_writer(raw, attrs=True),
                            checked(reader, f"{raw['namespace']}.{name} v{version}"))


def prefix_schema(raw: dict[str, Any], stop_at: str) -> dict[str, Any]:
    """The record without `stop_at` and every field after it (what the audit hash covers)."""
    names = [f["name"] for f in raw["fields"]]
    return {**raw, "name": raw["name"] + "Prefix", "fields": raw["fields"][:names.index(stop_at)]}
