"""docs/architecture.md's map of the house names every package the wheel ships, and nothing else.

The map is the fenced block under "Packages": a line starting with `path/` names a directory
(indented lines are inside the last less-indented one). Each package in pyproject's `packages`
must be named there, and every named directory must exist in the tree, so a room added, split or
removed without its line fails here.
"""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
# where each import root lives in the tree (pyproject's package-dir)
PACKAGE_DIR = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-dir"]


def _map_block() -> str:
    page = (ROOT / "docs" / "architecture.md").read_text()
    section = page.split("## Packages", 1)[1]
    return section.split("```", 2)[1]


def mapped_dirs(block: str) -> set[str]:
    """The directories the map names, as paths from the repository root."""
    found: set[str] = set()
    stack: list[tuple[int, str]] = []  # (indent, directory)
    for line in block.splitlines():
        match = re.match(r"^( *)([a-z_]+(?:/[a-z_]+)*)/(?:\s|$)", line)
        if not match:
            continue
        indent, path = len(match.group(1)), match.group(2)
        while stack and stack[-1][0] >= indent:
            stack.pop()
        full = f"{stack[-1][1]}/{path}" if stack else path
        stack.append((indent, full))
        found.add(full)
    return found


def _package_dir(package: str) -> str:
    parts = package.split(".")
    for size in range(len(parts), 0, -1):
        head = ".".join(parts[:size])
        if head in PACKAGE_DIR:
            return "/".join([PACKAGE_DIR[head], *parts[size:]])
    raise AssertionError(f"{package}: no package-dir for it in pyproject.toml")


def test_every_shipped_package_is_on_the_map() -> None:
    packages = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"]
    mapped = mapped_dirs(_map_block())
    missing = sorted(p for p in packages if p != "runfacts" and _package_dir(p) not in mapped)
    assert not missing, f"docs/architecture.md's map lacks {missing}: add a line for each room"


def test_every_mapped_directory_exists() -> None:
    gone = sorted(d for d in mapped_dirs(_map_block()) if not (ROOT / d).is_dir())
    assert not gone, f"docs/architecture.md's map names {gone}, which are not in the tree"


def test_the_parser_reads_nesting() -> None:
    block = "schemas/   the contract\n  spec/     edit here\nprocessors/\n  decider/  x\n    evolve/ y\n"
    assert mapped_dirs(block) == {"schemas", "schemas/spec", "processors", "processors/decider",
                                  "processors/decider/evolve"}
