"""The catalog of every shipped schema version, parsed once.

Files live under `schemas/avro/<kind>s/<Name>.v<N>.avsc` (package data, read with
importlib.resources). `avro/catalog.lock.json` records each shipped file's digest, so an
edit to a shipped version is caught by `runfacts schemas check`. The newest version of a
type is its reader schema; every older one is a writer the codec still reads.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass, field
from functools import cache
from importlib import resources
from importlib.resources.abc import Traversable
from pathlib import Path
from typing import Any, Literal, cast

from fastavro import parse_schema
from fastavro.schema import fingerprint, to_parsing_canonical_form

from runfacts.schemas.errors import ContractViolation

Kind = Literal["event", "command"]
KINDS: tuple[Kind, ...] = ("event", "command")
TYPE_FIELD: dict[Kind, str] = {"event": "eventType", "command": "commandType"}
ID_FIELD: dict[Kind, str] = {"event": "eventId", "command": "commandId"}
LOCK_FILE = "catalog.lock.json"
_FILE_NAME = re.compile(r"^(?P<name>[A-Z][A-Za-z0-9]*)\.v(?P<version>[1-9][0-9]*)\.avsc$")


@dataclass(frozen=True)
class SchemaEntry:
    """One shipped (type, version): its JSON, parsed form and wire fingerprint."""

    kind: Kind
    fullname: str
    type_name: str
    version: int
    raw: dict[str, Any] = field(repr=False)
    parsed: dict[str, Any] = field(repr=False)
    envelope: dict[str, Any] = field(repr=False)
    fingerprint: bytes
    digest: str

    @property
    def name(self) -> str:
        """The record's short name (the model class name)."""
        return self.fullname.rsplit(".", 1)[1]


@dataclass(frozen=True)
class Catalog:
    """All shipped versions, indexed for the codec."""

    entries: tuple[SchemaEntry, ...]
    by_fingerprint: dict[bytes, SchemaEntry]
    current: dict[str, SchemaEntry]
    by_type: dict[str, SchemaEntry]
    lock: dict[str, dict[str, str]]

    def versions(self, fullname: str) -> list[SchemaEntry]:
        """Every shipped version of a type, oldest first."""
        return sorted((e for e in self.entries if e.fullname == fullname), key=lambda e: e.version)

    def entry(self, type_name: str, version: int | None = None) -> SchemaEntry:
        """The entry for a dotted type at a version (default: current); KeyError if unknown."""
        current = self.by_type[type_name]
        if version is None or version == current.version:
            return current
        for candidate in self.versions(current.fullname):
            if candidate.version == version:
                return candidate
        raise KeyError(f"{type_name} v{version}")


def fingerprint_of(schema: dict[str, Any]) -> bytes:
    """CRC-64-AVRO fingerprint of the schema's canonical form, little-endian (single-object)."""
    return bytes.fromhex(fingerprint(to_parsing_canonical_form(schema), "CRC-64-AVRO"))


def envelope_prefix(raw: dict[str, Any]) -> dict[str, Any]:
    """The record without its trailing payload: reading it stops before the payload bytes."""
    fields = raw["fields"]
    if fields[-1]["name"] != "payload":
        raise ContractViolation(raw["name"], None, "the last field must be 'payload'")
    return {**raw, "name": raw["name"] + "Envelope", "fields": fields[:-1]}


def default_root() -> Traversable:
    """The packaged avro/ folder."""
    return resources.files("runfacts.schemas").joinpath("avro")


def load_entry(kind: Kind, file: Traversable) -> SchemaEntry:
    """Parse one .avsc file and check its name, type and version agree with the file name."""
    match = _FILE_NAME.match(file.name)
    if match is None:
        raise ContractViolation(file.name, None, "file name must be <Name>.v<N>.avsc")
    text = file.read_text(encoding="utf-8")
    raw = json.loads(text)
    fullname = f"{raw.get('namespace', '')}.{raw['name']}"
    version = int(match["version"])
    if raw["name"] != match["name"]:
        raise ContractViolation(fullname, version, f"record name differs from file {file.name}")
    defaults = {f["name"]: f.get("default") for f in raw["fields"]}
    if defaults.get("schemaVersion") != version:
        raise ContractViolation(fullname, version, "schemaVersion default must equal the version")
    parsed = cast(dict[str, Any], parse_schema(raw))
    envelope = cast(dict[str, Any], parse_schema(envelope_prefix(raw)))
    return SchemaEntry(kind, fullname, defaults[TYPE_FIELD[kind]], version, raw, parsed,
                       envelope, fingerprint_of(raw), hashlib.sha256(text.encode()).hexdigest())


def load_catalog(root: Traversable | Path | None = None) -> Catalog:
    """Load every shipped version under `root` (default: the packaged avro/ folder)."""
    base = default_root() if root is None else root
    entries: list[SchemaEntry] = []
    for kind in KINDS:
        folder = base.joinpath(kind + "s")
        if folder.is_dir():
            files = sorted((f for f in folder.iterdir() if f.name.endswith(".avsc")),
                           key=lambda f: f.name)
            entries.extend(load_entry(kind, f) for f in files)
    return _index(tuple(entries), _read_lock(base))


def _read_lock(base: Traversable | Path) -> dict[str, dict[str, str]]:
    lock = base.joinpath(LOCK_FILE)
    return json.loads(lock.read_text(encoding="utf-8")) if lock.is_file() else {}


def _index(entries: tuple[SchemaEntry, ...], lock: dict[str, dict[str, str]]) -> Catalog:
    by_fp: dict[bytes, SchemaEntry] = {}
    current: dict[str, SchemaEntry] = {}
    for entry in entries:
        clash = by_fp.get(entry.fingerprint)
        if clash is not None:
            raise ContractViolation(entry.fullname, entry.version,
                                    f"same canonical form as {clash.fullname} v{clash.version}")
        by_fp[entry.fingerprint] = entry
        if entry.fullname not in current or current[entry.fullname].version < entry.version:
            current[entry.fullname] = entry
    by_type: dict[str, SchemaEntry] = {}
    for entry in current.values():
        if entry.type_name in by_type:
            raise ContractViolation(entry.fullname, entry.version,
                                    f"type {entry.type_name!r} also used by "
                                    f"{by_type[entry.type_name].fullname}")
        by_type[entry.type_name] = entry
    return Catalog(entries, by_fp, current, by_type, lock)


@cache
def default_catalog() -> Catalog:
    """The packaged catalog, loaded and parsed once per process."""
    return load_catalog()
