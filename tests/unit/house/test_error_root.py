"""One error root (schemas/errors.py): every error runfacts raises on purpose is a RunfactsError,
so `runfacts` prints it as one line with exit 1 instead of a traceback."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from runfacts.dev import services
from runfacts.schemas.errors import RunfactsError

REPO = Path(__file__).resolve().parents[3]
# schemas/binary/varint.py stays standard-library only: the peer benchmarks load it by path
STANDALONE = {"schemas/binary/varint.py"}


def test_a_local_service_failure_is_a_runfacts_error_when_its_script_is_missing(monkeypatch, tmp_path) -> None:
    monkeypatch.setattr(services, "SCRIPTS", tmp_path)
    with pytest.raises(RunfactsError, match="kafka.sh not found"):
        services._run_script("kafka.sh", "start")


def test_every_error_class_descends_from_the_one_root_when_parsed() -> None:
    roots = {"RunfactsError"}
    stray = []
    for folder in ("runfacts", "schemas", "processors", "projections", "connectors"):
        for path in (REPO / folder).rglob("*.py"):
            rel = str(path.relative_to(REPO))
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, ast.ClassDef) and node.name.endswith("Error") and rel not in STANDALONE:
                    bases = {getattr(b, "id", getattr(b, "attr", "")) for b in node.bases}
                    if bases & {"Exception", "RuntimeError", "ValueError"} and node.name not in roots:
                        stray.append(f"{rel}:{node.name}")
    assert stray == [], f"errors outside the RunfactsError root: {stray}"
