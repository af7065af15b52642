"""The public API is what the root doorway names: README, docs/ and examples/ import nothing else.

`runfacts.PUBLIC_MODULES` lists the doorways a user imports from; every `from runfacts.X import
name` in a Python block of README.md or docs/, and in examples/, must name one of them and a name
in its `__all__` (the generated contract modules, which have no `__all__`: a public module-level
name). A page that teaches an internal path would make that path API by accident.
"""

from __future__ import annotations

import ast
import importlib
import re
from pathlib import Path

import pytest

import runfacts

ROOT = Path(__file__).resolve().parents[3]
BLOCK = re.compile(r"```python\n(.*?)```", re.S)


def _sources() -> list[tuple[str, str]]:
    pages = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
    found = [(f"{page.relative_to(ROOT)} block {n}", block) for page in pages
             for n, block in enumerate(BLOCK.findall(page.read_text()), 1)]
    found += [(str(path.relative_to(ROOT)), path.read_text()) for path in sorted((ROOT / "examples").glob("*.py"))]
    return found


def _public_names(module: str) -> set[str]:
    loaded = importlib.import_module(module)
    names = getattr(loaded, "__all__", None)
    if names is None:
        return {name for name in vars(loaded) if not name.startswith("_")}
    return set(names)


def _imports(source: str) -> list[tuple[str, list[str]]]:
    try:
        tree = ast.parse(source)
    except SyntaxError:  # a fragment (`...` bodies are fine; a console session is not Python)
        return []
    found: list[tuple[str, list[str]]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("runfacts"):
            found.append((node.module, [alias.name for alias in node.names]))
        elif isinstance(node, ast.Import):
            found += [(alias.name, []) for alias in node.names if alias.name.startswith("runfacts.")]
    return found


SOURCES = _sources()


def test_docs_and_examples_are_scanned() -> None:
    assert len(SOURCES) >= 30 and any(name.startswith("examples/") for name, _ in SOURCES)
    assert sum(len(_imports(source)) for _, source in SOURCES) > 20


@pytest.mark.parametrize(("where", "source"), SOURCES, ids=[name for name, _ in SOURCES])
def test_imports_only_public_doorways(where: str, source: str) -> None:
    for module, names in _imports(source):
        assert module in runfacts.PUBLIC_MODULES, (
            f"{where} imports {module}: not a public doorway. Import from one of runfacts.PUBLIC_MODULES "
            "(re-export the name from its room's doorway if users need it)")
        missing = sorted(set(names) - _public_names(module) - {"*"})
        assert not missing, f"{where} imports {missing} from {module}: add them to its __all__ or use public names"


def test_public_modules_import_and_declare_names() -> None:
    for module in runfacts.PUBLIC_MODULES:
        assert _public_names(module), module


def test_the_checker_catches_an_internal_import() -> None:
    bad = "from runfacts.processors.policy.display import render\n"
    assert _imports(bad) == [("runfacts.processors.policy.display", ["render"])]
    assert "runfacts.processors.policy.display" not in runfacts.PUBLIC_MODULES
