"""Every room has a doorway (LAYOUT rule 1): a docstring saying what it holds and an `__all__`
whose names import; and pyproject ships every room."""

from __future__ import annotations

import importlib
import tomllib
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]
ROOTS = {"runfacts": "runfacts", "schemas": "runfacts.schemas", "processors": "runfacts.processors",
         "projections": "runfacts.projections", "connectors": "runfacts.connectors"}


def packages() -> list[str]:
    found = []
    for folder, dotted in ROOTS.items():
        for init in (REPO / folder).rglob("__init__.py"):
            rel = init.parent.relative_to(REPO / folder).parts
            found.append(".".join([dotted, *rel]))
    return sorted(found)


PACKAGES = packages()
SUBPACKAGES = [p for p in PACKAGES if p not in ROOTS.values()]


@pytest.mark.parametrize("name", PACKAGES)
def test_package_has_a_docstring_and_an_importable_all_when_imported(name: str) -> None:
    package = importlib.import_module(name)
    assert (package.__doc__ or "").strip(), f"{name}/__init__.py needs a docstring saying what the room holds"
    assert "relayout.py" not in package.__doc__, f"{name}/__init__.py still has the placeholder docstring"
    exported = getattr(package, "__all__", None)
    assert isinstance(exported, list), f"{name} has no __all__ list"
    missing = [n for n in exported if not hasattr(package, n)]
    assert missing == [], f"{name}.__all__ names what it does not export: {missing}"


@pytest.mark.parametrize("name", SUBPACKAGES)
def test_subpackage_docstring_says_what_is_pure_and_what_is_a_shell_when_read(name: str) -> None:
    doc = importlib.import_module(name).__doc__ or ""
    assert any(word in doc for word in ("Pure:", "Shells:", "Shell:")), \
        f"{name}'s docstring does not say which modules are pure and which are shells"


def test_pyproject_ships_every_package_when_built() -> None:
    config = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]
    listed, clone_only = config["setuptools"]["packages"], config["runfacts"]["clone-only"]
    assert not set(listed) & set(clone_only), "a clone-only package is also listed to ship"
    assert sorted(listed + clone_only) == PACKAGES, \
        "pyproject [tool.setuptools] packages must list every package of the tree but [tool.runfacts] clone-only"


def test_no_room_holds_more_than_twelve_modules_when_counted() -> None:
    for name in PACKAGES:
        if name == "runfacts.cli":
            continue  # one thin module per command group (LAYOUT rule 4): the next test holds it
        folder = Path(importlib.import_module(name).__file__).parent
        count = len([p for p in folder.glob("*.py") if p.name != "__init__.py"])
        assert count <= 12, f"{name} holds {count} modules: split it into rooms"


def test_every_cli_module_is_a_command_group_when_read() -> None:
    # runfacts/cli is exempt from the ~12 rule only because each module is one `runfacts <group>`
    # (typer), besides the shared rendering and `python -m runfacts.cli`; anything else is a room
    # of its own waiting to be carved out
    folder = REPO / "runfacts" / "cli"
    helpers = {"__init__.py", "__main__.py", "render.py"}
    not_commands = [p.name for p in sorted(folder.glob("*.py")) if p.name not in helpers
                    and not any(line.startswith(("import typer", "from typer")) for line in p.read_text().splitlines())]
    assert not_commands == [], f"runfacts/cli holds modules that are not command groups: {not_commands}"
