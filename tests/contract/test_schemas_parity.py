"""The models, the .avsc files, the spec and the lock are in step."""

from __future__ import annotations

import io
import types
from pathlib import Path
from typing import Any, Union, get_args, get_origin

import pytest
from fastavro import schemaless_reader, schemaless_writer
from fastavro.validation import validate
from pydantic import BaseModel

from runfacts.schemas import construct
from runfacts.schemas.catalog import default_catalog, default_root
from runfacts.schemas.codec import _classes
from runfacts.schemas.spec.fields import all_types
from runfacts.schemas.spec.generate import build_schema, render, schema_path
from runfacts.schemas.spec.modelgen import render_models
from runfacts.schemas.spec.samples import sample

CATALOG = default_catalog()
CURRENT = sorted(CATALOG.current.values(), key=lambda e: e.fullname)
SCHEMAS_DIR = Path(str(default_root())).parent


def test_generated_models_match_files_when_regenerated_from_avsc() -> None:
    for module, text in render_models(CATALOG).items():
        assert (SCHEMAS_DIR / f"{module}.py").read_text(encoding="utf-8") == text, module


@pytest.mark.parametrize("spec", all_types(), ids=lambda s: s.type_name)
def test_shipped_avsc_equals_spec_when_spec_version_is_shipped(spec) -> None:
    path = schema_path(Path(str(default_root())), spec)
    assert path.read_text(encoding="utf-8") == render(build_schema(spec))


def test_spec_covers_every_current_type_when_catalog_loads() -> None:
    spec_names = {f"runfacts.{s.kind}s.{s.name}": s.version for s in all_types()}
    assert spec_names == {e.fullname: e.version for e in CURRENT}


def test_lock_holds_every_shipped_digest_when_catalog_loads() -> None:
    shipped = {(e.fullname, str(e.version)): e.digest for e in CATALOG.entries}
    locked = {(name, v): d for name, versions in CATALOG.lock.items() for v, d in versions.items()}
    assert shipped == locked


@pytest.mark.parametrize("entry", CURRENT, ids=lambda e: e.type_name)
def test_model_fields_mirror_avsc_when_compared_field_by_field(entry) -> None:
    _assert_parity(_classes()[entry.type_name], entry.raw, entry.raw["namespace"], {})


@pytest.mark.parametrize("entry", CURRENT, ids=lambda e: e.type_name)
def test_model_dump_passes_strict_fastavro_validation_when_round_tripped(entry) -> None:
    model = _classes()[entry.type_name].model_validate(sample(entry, seed=3))
    values = construct.dump(model)
    assert validate(values, entry.parsed, strict=True)
    assert values == _tuples_to_lists(model.model_dump())
    out = io.BytesIO()
    schemaless_writer(out, entry.parsed, values, strict=True)
    read = schemaless_reader(io.BytesIO(out.getvalue()), entry.parsed, None)
    assert type(model).model_validate(read) == model


def _tuples_to_lists(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _tuples_to_lists(v) for k, v in value.items()}
    if isinstance(value, tuple | list):
        return [_tuples_to_lists(v) for v in value]
    return value


def _assert_parity(cls: type[BaseModel], record: dict[str, Any], namespace: str,
                   named: dict[str, Any]) -> None:
    named[f"{record.get('namespace', namespace)}.{record['name']}"] = record
    namespace = record.get("namespace", namespace)
    assert list(cls.model_fields) == [f["name"] for f in record["fields"]], cls.__name__
    for field in record["fields"]:
        info = cls.model_fields[field["name"]]
        where = f"{cls.__name__}.{field['name']}"
        nullable = isinstance(field["type"], list) and "null" in field["type"]
        assert (type(None) in get_args(info.annotation)) == nullable, where
        if "default" in field:
            expected = () if field["default"] == [] else field["default"]
            assert not info.is_required() and info.default == expected, where
        else:
            assert info.is_required(), where
        _assert_nested(info.annotation, field["type"], namespace, named)


def _assert_nested(annotation: Any, avro: Any, namespace: str, named: dict[str, Any]) -> None:
    if isinstance(avro, list):
        avro = next(b for b in avro if b != "null")
        annotation = next(a for a in get_args(annotation) if a is not type(None))
    if isinstance(avro, str) and avro in named:
        avro = named[avro]
    if isinstance(avro, dict) and avro.get("type") == "record":
        assert isinstance(annotation, type) and issubclass(annotation, BaseModel)
        _assert_parity(annotation, avro, namespace, named)
    elif isinstance(avro, dict) and avro.get("type") == "enum":
        assert set(get_args(annotation)) == set(avro["symbols"])
        named[f"{avro.get('namespace', namespace)}.{avro['name']}"] = avro
    elif isinstance(avro, dict) and avro.get("type") == "array":
        assert get_origin(annotation) is tuple
        _assert_nested(get_args(annotation)[0], avro["items"], namespace, named)
    else:
        assert get_origin(annotation) not in (Union, types.UnionType), annotation
