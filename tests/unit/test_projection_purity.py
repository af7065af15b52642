"""The projection reducers are pure: they import no I/O, clock or randomness (STYLE §1)."""

from __future__ import annotations

import ast
import importlib.util
from pathlib import Path

import pytest

PURE = [f"runfacts.projections.{m}" for m in ("audit", "audit_summary", "audit_check",
                                              "facts", "trajectory",
                                              "trajectory_model", "user_view", "records")] + [
    "runfacts.schemas.avrocode", "runfacts.schemas.avrovarint", "runfacts.schemas.avrowriter"]
FORBIDDEN = {"confluent_kafka", "rocksdict", "fastavro", "time", "uuid", "random", "os",
             "runfacts.projections.eventlog", "runfacts.projections.kafkalog",
             "runfacts.projections.sinks", "runfacts.projections.replay",
             "runfacts.schemas.codec"}


def _source(module: str) -> str:
    spec = importlib.util.find_spec(module)
    assert spec is not None and spec.origin is not None, module
    return Path(spec.origin).read_text()


def _imports(module: str) -> set[str]:
    tree = ast.parse(_source(module))
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            found.add(node.module)
    return found


CLOCK_CALLS = {"now", "utcnow", "today"}


@pytest.mark.parametrize("module", PURE)
def test_pure_module_imports_nothing_forbidden_when_parsed(module) -> None:
    imported = _imports(module)
    bad = {name for name in imported for banned in FORBIDDEN
           if name == banned or name.startswith(banned + ".")}
    assert bad == set(), f"{module} imports {sorted(bad)}"


@pytest.mark.parametrize("module", PURE)
def test_pure_module_reads_no_clock_when_parsed(module) -> None:
    tree = ast.parse(_source(module))
    calls = {node.func.attr for node in ast.walk(tree)
             if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)}
    assert calls & CLOCK_CALLS == set()
