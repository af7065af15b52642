"""The one purity rule (STYLE §1, LAYOUT rule 7): every pure module, one forbidden set.

Which modules are pure is said once, in each room's doorway ("Pure: core (...), context, ...");
this test reads the list off the doorways, so a claim and the check cannot disagree.

A pure module (a decider, a reducer, a policy check, a rendering) takes what it needs as
arguments: it imports no broker or store client, no clock, no randomness, no environment and
no socket, and calls no `now()`. This replaces the five purity tests the packages each had,
with their five different forbidden sets.
"""

from __future__ import annotations

import ast
import importlib.util
import re
from pathlib import Path

import pytest

ROOTS = {"runfacts": "runfacts", "schemas": "runfacts.schemas", "processors": "runfacts.processors",
         "projections": "runfacts.projections", "connectors": "runfacts.connectors"}
REPO = Path(__file__).resolve().parents[3]


def _outside_parentheses(text: str) -> str:
    kept, depth = [], 0
    for ch in text:
        depth += (ch == "(") - (ch == ")")
        if depth == 0 and ch not in "()":
            kept.append(ch)
    return "".join(kept)


def pure_claims(doc: str) -> set[str]:
    """The modules a doorway's docstring calls pure: the names listed after each `Pure:`, up to the
    end of that sentence (parenthesised remarks skipped; "this doorway" is the package itself)."""
    text, found = " ".join(doc.split()), set()
    for match in re.finditer(r"(?:^|\. |— )(?:Modules — )?[Pp]ure(?: and total)?: ", text):
        sentence = re.split(r"\. |\.$|;", _outside_parentheses(text[match.end():]))[0]
        for name in re.split(r",| and ", sentence):
            name = name.strip().strip("`").strip()
            if re.fullmatch(r"[a-z_.]+", name):
                found.add(name)
    return found


def pure_modules() -> list[str]:
    """Every module a doorway calls pure: the one list, read off the doorways (LAYOUT rule 1)."""
    found = set()
    for folder, dotted in ROOTS.items():
        for init in (REPO / folder).rglob("__init__.py"):
            package = ".".join([*dotted.split("."), *init.parent.relative_to(REPO / folder).parts])
            found |= {f"{package}.{name}" for name in pure_claims(ast.get_docstring(ast.parse(init.read_text())) or "")}
    return sorted(found)


PURE = pure_modules()
# uuid is allowed for name-based ids (uuid5, derive_id); uuid1 and uuid4 read the clock or randomness
FORBIDDEN = {"confluent_kafka", "rocksdict", "fastavro", "time", "random", "os", "socket", "secrets"}
CLOCK_CALLS = {"now", "utcnow", "today", "uuid1", "uuid4"}


def _tree(module: str) -> ast.Module:
    spec = importlib.util.find_spec(module)
    assert spec is not None and spec.origin is not None, f"{module} is listed as pure but does not exist"
    return ast.parse(Path(spec.origin).read_text())


def _imported_roots(tree: ast.Module) -> set[str]:
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            found.add(node.module.split(".")[0])
    return found


@pytest.mark.parametrize("module", PURE)
def test_pure_module_imports_nothing_forbidden_when_parsed(module: str) -> None:
    bad = _imported_roots(_tree(module)) & FORBIDDEN
    assert bad == set(), f"{module} is pure but imports {sorted(bad)}: take the value as an argument"


@pytest.mark.parametrize("module", PURE)
def test_pure_module_reads_no_clock_when_parsed(module: str) -> None:
    calls = {node.func.attr for node in ast.walk(_tree(module))
             if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)}
    assert calls & CLOCK_CALLS == set(), f"{module} is pure but reads the clock: take `now` as an argument"


def test_purity_check_catches_a_forbidden_import_when_one_is_written() -> None:
    tree = ast.parse("import os.path\nfrom time import monotonic\nfrom runfacts.schemas import codec\n")
    assert _imported_roots(tree) & FORBIDDEN == {"os", "time"}


def test_the_list_is_read_off_the_doorways() -> None:
    assert len(PURE) > 60
    assert {"runfacts.processors.decider.core", "runfacts.projections.user_view", "runfacts.ids",
            "runfacts.schemas.events", "runfacts.processors.decider.evolve.tools"} <= set(PURE)
    assert pure_claims("Pure: core (decide, x), state. Shells: app (the shell).") == {"core", "state"}
    assert pure_claims("Modules — pure: `outcomes` (a, b), `errors`. Shells: `client`") == {"outcomes", "errors"}


def test_purity_check_catches_a_random_id_when_one_is_made() -> None:
    tree = ast.parse("import uuid\nx = uuid.uuid4()\ny = uuid.uuid5(uuid.NAMESPACE_URL, 'a')\n")
    calls = {node.func.attr for node in ast.walk(tree)
             if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)}
    assert calls & CLOCK_CALLS == {"uuid4"}
