"""Golden files: bytes written by every shipped schema version, kept forever.

For each (type, version) the folder holds `<kind>s/<Name>.v<N>.avro` (a single-object
encoded record, as that version's writer produced it) and `<Name>.v<N>.json` (the same
value in Avro's JSON encoding, for people and for the tests). Existing files are never
rewritten, so old bytes stay exactly as shipped; the tests decode and upcast all of them.
"""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any, cast

from fastavro import json_reader, json_writer

from runfacts.schemas.catalog import Catalog, SchemaEntry
from runfacts.schemas.codec import Codec
from runfacts.schemas.spec.samples import sample


def golden_paths(folder: Path, entry: SchemaEntry) -> tuple[Path, Path]:
    """Where the bytes and the JSON twin of one (type, version) live."""
    stem = f"{entry.name}.v{entry.version}"
    base = folder / f"{entry.kind}s"
    return base / f"{stem}.avro", base / f"{stem}.json"


def write_golden(folder: Path, catalog: Catalog) -> list[Path]:
    """Write golden files for versions that have none; return the new files."""
    codec = Codec(catalog=catalog)
    written: list[Path] = []
    for entry in catalog.entries:
        binary, text = golden_paths(folder, entry)
        if binary.exists() and text.exists():
            continue
        values = sample(entry, seed=1)
        binary.parent.mkdir(parents=True, exist_ok=True)
        binary.write_bytes(codec.encode_dict(values, entry.version))
        text.write_text(to_avro_json(entry, values), encoding="utf-8")
        written += [binary, text]
    return written


def missing_golden(folder: Path, catalog: Catalog) -> list[SchemaEntry]:
    """Shipped versions without both golden files."""
    return [e for e in catalog.entries if not all(p.exists() for p in golden_paths(folder, e))]


def to_avro_json(entry: SchemaEntry, values: dict[str, Any]) -> str:
    """One value in Avro's JSON encoding under the entry's schema."""
    out = io.StringIO()
    json_writer(out, entry.parsed, [values])
    return out.getvalue()


def from_avro_json(entry: SchemaEntry, text: str) -> dict[str, Any]:
    """Read back a value written by `to_avro_json`."""
    return cast(dict[str, Any], next(iter(json_reader(io.StringIO(text), entry.parsed))))
