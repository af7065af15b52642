"""The crash harness and the payment simulator stay in the clone: pyproject does not ship them, and
every shipped module that reaches one first checks it is there (`runfacts.dev.require_clone`), so
an installed wheel's CLI names the fix instead of failing to import.
tests/integration/test_wheel_build.py builds the wheel and runs its CLI."""

from __future__ import annotations

import ast
import tomllib
from pathlib import Path

from runfacts.dev import CLONE_ONLY

ROOT = Path(__file__).resolve().parents[3]
CONFIG = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]


def test_the_clone_only_packages_are_not_shipped_and_are_what_the_code_checks() -> None:
    clone_only, shipped = CONFIG["runfacts"]["clone-only"], CONFIG["setuptools"]["packages"]
    assert sorted(clone_only) == sorted(CLONE_ONLY) == ["runfacts.dev.crash", "runfacts.dev.provider"]
    assert not [p for p in shipped if any(p == c or p.startswith(c + ".") for c in clone_only)]
    for package in clone_only:
        assert (ROOT / package.replace(".", "/") / "__init__.py").is_file(), f"{package} is not in the clone"


def _reaches(tree: ast.AST, package: str) -> bool:
    """Whether a module imports `package` (anywhere) or runs it with `python -m`."""
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith(package):
            return True
        if isinstance(node, ast.Import) and any(a.name.startswith(package) for a in node.names):
            return True
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value.startswith(package + "."):
            return True
    return False


def _checks(tree: ast.AST, package: str) -> bool:
    return any(isinstance(node, ast.Call) and getattr(node.func, "id", "") == "require_clone"
               and node.args and isinstance(node.args[0], ast.Constant) and node.args[0].value == package
               for node in ast.walk(tree))


def test_every_shipped_module_that_reaches_a_clone_only_package_checks_for_it_first() -> None:
    unchecked = []
    for package in CONFIG["setuptools"]["packages"]:
        if not package.startswith("runfacts.") or package.split(".")[1] in ("schemas", "processors", "projections",
                                                                             "connectors"):
            continue  # the four code packages never import runfacts.dev (tests/unit/house/test_layering.py)
        for module in (ROOT / package.replace(".", "/")).glob("*.py"):
            tree = ast.parse(module.read_text())
            for clone_only in CLONE_ONLY:
                if _reaches(tree, clone_only) and not _checks(tree, clone_only):
                    unchecked.append(f"{module.relative_to(ROOT)} -> {clone_only}")
    assert unchecked == [], f"call runfacts.dev.require_clone before reaching a clone-only package: {unchecked}"


def test_the_rule_sees_an_unchecked_import() -> None:
    tree = ast.parse("def f():\n    from runfacts.dev.crash.rows import ROWS\n")
    assert _reaches(tree, "runfacts.dev.crash") and not _checks(tree, "runfacts.dev.crash")
    checked = ast.parse("def f():\n    require_clone('runfacts.dev.provider', 'x')\n"
                        "    args = ['-m', 'runfacts.dev.provider.server']\n")
    assert _reaches(checked, "runfacts.dev.provider") and _checks(checked, "runfacts.dev.provider")
