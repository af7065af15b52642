"""Each bridge's extra installs what its documented example and the bridge import, statically: the
example's and the bridge module's imports (parsed, not run) are mapped to the installed
distribution that provides each module (its RECORD), and that distribution must be among what
`pip install 'runfacts[<extra>]'` brings: the extra's requirements and runfacts' own, with their
requirements, as the installed metadata declares them (no network)."""

from __future__ import annotations

import ast
import functools
import importlib.metadata as md
import importlib.util
import re
import sys
import tomllib
from pathlib import Path

import pytest
from packaging.requirements import Requirement

REPO = Path(__file__).resolve().parents[3]
PYPROJECT = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]

EXTRAS = {  # extra -> the documented example (docs/integrations.md shows only its code) and the bridge
    "pydantic-ai": ["examples/pydantic_ai_refund.py", "runfacts/integrations/pydantic_ai.py"],
    "langgraph": ["examples/langgraph_refund.py", "runfacts/integrations/langgraph.py"],
    "openai-agents": ["examples/openai_agents_refund.py", "runfacts/integrations/openai_agents.py"],
}


def canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def imported_modules(path: Path) -> set[str]:
    """The absolute modules a file imports (every `import x.y` / `from x.y import z`), but the
    standard library's and runfacts' own."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
    return {m for m in found if m.split(".")[0] not in sys.stdlib_module_names and m.split(".")[0] != "runfacts"
            and m != "__future__"}


def providing_distribution(module: str) -> str:
    """The installed distribution whose files hold `module` (a namespace package such as
    `langgraph` is shared by several: the one holding this very submodule)."""
    spec = importlib.util.find_spec(module)
    assert spec is not None, f"{module} is not installed: pip install -e '.[dev]'"
    where = Path(spec.origin) if spec.origin and spec.origin != "namespace" else None
    candidates = _top_level().get(module.split(".")[0], [])
    for name in candidates:
        if where is None or where.resolve() in _files(name):
            return canonical(name)
    raise AssertionError(f"no installed distribution holds {module} ({where}); candidates {candidates}")


@functools.cache
def _top_level() -> dict[str, list[str]]:
    return dict(md.packages_distributions())


@functools.cache
def _files(name: str) -> frozenset[Path]:
    dist = md.distribution(name)
    return frozenset(Path(str(dist.locate_file(f))).resolve() for f in dist.files or () if str(f).endswith(".py"))


def installs(requirements: list[str]) -> set[str]:
    """The distributions `pip install` brings for `requirements`: them and, transitively, what
    their installed metadata requires (markers evaluated here, no extras of theirs)."""
    seen: set[str] = set()
    todo = list(requirements)
    while todo:
        req = Requirement(todo.pop())
        if req.marker is not None and not req.marker.evaluate({"extra": ""}):
            continue
        name = canonical(req.name)
        if name in seen:
            continue
        seen.add(name)
        try:
            todo.extend(md.requires(name) or [])
            todo.extend(r for extra in req.extras for r in _extra_requirements(name, extra))
        except md.PackageNotFoundError:
            pass  # listed but not installed here: it is installed by the extra all the same
    return seen


def _extra_requirements(name: str, extra: str) -> list[str]:
    out = []
    for raw in md.requires(name) or []:
        req = Requirement(raw)
        if req.marker is not None and req.marker.evaluate({"extra": extra}):
            out.append(str(req).split(";")[0])
    return out


@pytest.mark.parametrize("extra", sorted(EXTRAS))
def test_each_extra_installs_what_its_documented_example_and_its_bridge_import(extra: str) -> None:
    brought = installs([*PYPROJECT["optional-dependencies"][extra], *PYPROJECT["dependencies"]])
    missing = []
    for file in EXTRAS[extra]:
        for module in sorted(imported_modules(REPO / file)):
            dist = providing_distribution(module)
            if dist not in brought:
                missing.append(f"{file} imports {module} (distribution {dist})")
    assert not missing, (f"pip install 'runfacts[{extra}]' does not install what these need: {missing}; add the "
                         f"distributions to [project.optional-dependencies] {extra} in pyproject.toml")


def test_the_import_scan_sees_submodules_of_a_shared_namespace() -> None:
    assert "langgraph.checkpoint.sqlite" in imported_modules(REPO / "examples/langgraph_refund.py")
    assert providing_distribution("langgraph.checkpoint.sqlite") == "langgraph-checkpoint-sqlite"
    assert providing_distribution("langgraph.graph") == "langgraph"
    assert "langgraph-checkpoint-sqlite" not in installs(["langgraph>=1.2,<1.3"])  # what the old extra missed
