"""Golden files: bytes written by every shipped version decode and upcast to current models."""

from __future__ import annotations

import io
from pathlib import Path

import pytest
from fastavro import schemaless_reader

from runfacts.schemas.catalog import ID_FIELD, default_catalog
from runfacts.schemas.codec import Codec, CodecSettings, _classes
from runfacts.schemas.spec.golden import from_avro_json, golden_paths, missing_golden

GOLDEN = Path(__file__).parent / "golden"
CATALOG = default_catalog()
ENTRIES = sorted(CATALOG.entries, key=lambda e: (e.fullname, e.version))
STRICT = Codec(CodecSettings(validate=True))
TRUSTED = Codec(CodecSettings(validate=False))


def test_every_shipped_version_has_golden_files_when_catalog_loads() -> None:
    assert missing_golden(GOLDEN, CATALOG) == []


@pytest.mark.parametrize("entry", ENTRIES, ids=lambda e: f"{e.type_name}.v{e.version}")
def test_golden_bytes_match_their_json_twin_when_read_with_the_writer_schema(entry) -> None:
    binary, text = golden_paths(GOLDEN, entry)
    data = binary.read_bytes()
    assert data[:10] == b"\xc3\x01" + entry.fingerprint
    as_written = schemaless_reader(io.BytesIO(data[10:]), entry.parsed, None)
    assert as_written == from_avro_json(entry, text.read_text(encoding="utf-8"))


@pytest.mark.parametrize("entry", ENTRIES, ids=lambda e: f"{e.type_name}.v{e.version}")
def test_golden_bytes_decode_to_current_model_when_written_by_any_version(entry) -> None:
    binary, text = golden_paths(GOLDEN, entry)
    data = binary.read_bytes()
    written = from_avro_json(entry, text.read_text(encoding="utf-8"))
    current = CATALOG.current[entry.fullname]
    model = STRICT.decode(data)
    assert type(model) is _classes()[current.type_name]
    assert model.schemaVersion == current.version
    assert TRUSTED.decode(data) == model
    id_field = ID_FIELD[entry.kind]
    assert getattr(model, id_field) == written[id_field]
    assert model.runId == written["runId"]
    assert STRICT.decode_envelope(data).schemaVersion == entry.version


@pytest.mark.parametrize("entry", ENTRIES, ids=lambda e: f"{e.type_name}.v{e.version}")
def test_golden_model_reencodes_under_current_schema_when_upcast(entry) -> None:
    model = STRICT.decode(golden_paths(GOLDEN, entry)[0].read_bytes())
    data = STRICT.encode(model)
    assert data[2:10] == CATALOG.current[entry.fullname].fingerprint
    assert STRICT.decode(data) == model
