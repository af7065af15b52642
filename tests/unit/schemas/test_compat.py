"""Backward-compatibility rules and the `runfacts schemas check` command."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from runfacts.cli import app
from runfacts.schemas.catalog import default_root, load_catalog
from runfacts.schemas.errors import ContractViolation
from runfacts.schemas.spec.compat import backward_problems, check_catalog
from runfacts.schemas.spec.events import EVENTS
from runfacts.schemas.spec.fields import STRING, f
from runfacts.schemas.spec.generate import update_lock, write_schemas

RUNNER = CliRunner()


def rec(*fields: dict[str, Any], name: str = "R") -> dict[str, Any]:
    return {"type": "record", "name": name, "namespace": "t", "fields": list(fields)}


def wrap(inner: Any) -> dict[str, Any]:
    return rec({"name": "payload", "type": {"type": "record", "name": "P", "fields": [
        {"name": "x", "type": inner}]}})


def test_backward_names_field_when_new_field_has_no_default() -> None:
    old = rec({"name": "a", "type": "string"})
    new = rec({"name": "a", "type": "string"}, {"name": "b", "type": "long"})
    assert backward_problems(new, old) == ["b: new field has no default (old data lacks it)"]


def test_backward_accepts_new_field_when_it_has_a_default() -> None:
    old = rec({"name": "a", "type": "string"})
    new = rec({"name": "a", "type": "string"}, {"name": "b", "type": ["null", "long"],
                                                "default": None})
    assert backward_problems(new, old) == []


def test_backward_accepts_rename_when_reader_field_has_alias() -> None:
    old = rec({"name": "message", "type": "string"})
    assert backward_problems(rec({"name": "detail", "type": "string", "aliases": ["message"]}),
                             old) == []
    assert backward_problems(rec({"name": "detail", "type": "string"}), old) == [
        "detail: new field has no default (old data lacks it)"]


@pytest.mark.parametrize(("writer", "reader", "ok"), [
    ("int", "long", True), ("long", "int", False), ("string", "bytes", True),
    ("string", "long", False), ("string", ["null", "string"], True),
    (["null", "string"], "string", False),
    ({"type": "array", "items": "int"}, {"type": "array", "items": "long"}, True),
    ({"type": "long", "logicalType": "timestamp-millis"}, "long", False),
])
def test_backward_follows_avro_resolution_when_field_type_changes(writer, reader, ok) -> None:
    problems = backward_problems(wrap(reader), wrap(writer))
    assert (problems == []) is ok
    assert all(p.startswith("payload.x") for p in problems)


def test_backward_rejects_removed_enum_symbol_unless_reader_has_default() -> None:
    old = wrap({"type": "enum", "name": "E", "symbols": ["a", "b"]})
    strict = wrap({"type": "enum", "name": "E", "symbols": ["a"]})
    lenient = wrap({"type": "enum", "name": "E", "symbols": ["a"], "default": "a"})
    assert backward_problems(strict, old) == [
        "payload.x: enum E lost symbols ['b'] and has no default"]
    assert backward_problems(lenient, old) == []


def test_shipped_catalog_has_no_problems_when_checked() -> None:
    assert check_catalog(load_catalog()) == []


@pytest.fixture
def avro_copy(tmp_path: Path) -> Path:
    target = tmp_path / "avro"
    shutil.copytree(Path(str(default_root())), target)
    return target


def _evolve_tool_call_failed(root: Path, extra: dict[str, Any]) -> None:
    spec = next(s for s in EVENTS if s.type_name == "tool.call.failed")
    evolved = type(spec)(spec.kind, spec.name, spec.type_name, spec.version + 1, spec.doc,
                         (*spec.fields, extra))
    write_schemas(root, (evolved,))
    update_lock(root)


def test_check_exits_nonzero_naming_the_field_when_new_version_is_incompatible(
        avro_copy: Path) -> None:
    _evolve_tool_call_failed(avro_copy, f("severity", STRING))
    result = RUNNER.invoke(app, ["schemas", "check", "--avro-dir", str(avro_copy)])
    assert result.exit_code == 1
    assert "runfacts.events.ToolCallFailed v1: not readable by v3: payload.severity" in \
        result.output
    assert "runfacts.events.ToolCallFailed v2: not readable by v3: payload.severity" in \
        result.output


def test_check_passes_when_new_version_adds_a_defaulted_field(avro_copy: Path) -> None:
    _evolve_tool_call_failed(avro_copy, f("severity", STRING, default="unknown"))
    result = RUNNER.invoke(app, ["schemas", "check", "--avro-dir", str(avro_copy)])
    assert result.exit_code == 0, result.output
    shipped = len(load_catalog(default_root()).entries)
    assert f"ok: {shipped + 1} shipped versions" in result.output


def test_check_exits_nonzero_when_a_shipped_file_was_edited(avro_copy: Path) -> None:
    path = avro_copy / "events" / "ToolCallFailed.v1.avsc"
    schema = json.loads(path.read_text())
    schema["doc"] = "edited after shipping"
    path.write_text(json.dumps(schema, indent=2))
    result = RUNNER.invoke(app, ["schemas", "check", "--avro-dir", str(avro_copy)])
    assert result.exit_code == 1
    assert "ToolCallFailed v1: changed after shipping" in result.output


def test_check_exits_nonzero_when_golden_files_are_missing(avro_copy: Path,
                                                           tmp_path: Path) -> None:
    result = RUNNER.invoke(app, ["schemas", "check", "--avro-dir", str(avro_copy),
                                 "--golden", str(tmp_path / "empty")])
    assert result.exit_code == 1
    assert "has no golden files" in result.output


def test_generate_refuses_to_rewrite_a_shipped_version_when_spec_changed_in_place(
        avro_copy: Path) -> None:
    spec = next(s for s in EVENTS if s.type_name == "approval.consumed")
    edited = type(spec)(spec.kind, spec.name, spec.type_name, spec.version, spec.doc,
                        (*spec.fields, f("extra", STRING, default="")))
    with pytest.raises(ContractViolation, match="shipped and frozen; bump the version"):
        write_schemas(avro_copy, (edited,))
