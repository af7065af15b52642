"""Tests have rooms: every unit test module sits in `tests/unit/<room>/`, named `test_<what>.py`,
the rooms mirroring the package (scripts/unit_rooms.py holds the rule and the list of rooms;
tests/README.md says where a new test goes). A flat module fails here naming its room."""

from __future__ import annotations

import importlib.util
import re
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]
UNIT = REPO / "tests" / "unit"

_spec = importlib.util.spec_from_file_location("unit_rooms", REPO / "scripts" / "unit_rooms.py")
assert _spec and _spec.loader
rooms = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(rooms)


def test_no_test_module_sits_flat_in_tests_unit_or_in_the_other_naming_style() -> None:
    found = rooms.misplaced(UNIT)
    assert not found, (
        "unit tests live in tests/unit/<room>/test_<what>.py (tests/README.md); move them "
        "(`.venv/bin/python scripts/unit_rooms.py --apply` does these moves and fixes their imports "
        "and the paths citing them):\n"
        + "\n".join(f"  git mv {p.relative_to(REPO)} tests/unit/{t}" for p, t in found.items()))


def test_every_room_is_a_package_the_rule_knows_and_holds_only_tests_and_their_support() -> None:
    strays = []
    for room in sorted(p for p in UNIT.iterdir() if p.is_dir() and p.name != "__pycache__"):
        if room.name not in rooms.ROOMS:
            strays.append(f"{room.relative_to(REPO)}/: not a room of scripts/unit_rooms.py ROOMS")
        if not (room / "__init__.py").is_file():
            strays.append(f"{room.relative_to(REPO)}/__init__.py missing (collection imports rooms as packages)")
        for sub in room.iterdir():
            if sub.is_dir() and sub.name != "__pycache__":
                strays.append(f"{sub.relative_to(REPO)}/: rooms are one level deep")
        for path in sorted(room.glob("*.py")):
            ok = (path.name.startswith("test_") or path.name.endswith("_support.py")
                  or path.name in ("__init__.py", "conftest.py"))
            if not ok:
                strays.append(f"{path.relative_to(REPO)}: a room holds test_*.py, *_support.py, __init__.py, "
                              "conftest.py")
    assert not strays, "\n".join(strays)


def test_support_modules_of_rooms_are_where_the_rule_says() -> None:
    here = {p.stem: p.parent.name for p in UNIT.glob("*/*_support.py")}
    assert here == rooms.SUPPORT, ("scripts/unit_rooms.py SUPPORT must name every support module of a room "
                                   f"(its import rewriting uses it): found {here}")


@pytest.mark.parametrize(("flat", "placed"), [
    ("test_decider_fold.py", "decider/test_fold.py"),
    ("schemas_codec_test.py", "schemas/test_codec.py"),
    ("test_dispatch_core.py", "dispatcher/test_core.py"),
    ("test_outbox_cli.py", "cli/test_outbox.py"),
    ("test_outbox_inbox.py", "connectors/test_outbox_inbox.py"),
    ("test_layering.py", "house/test_layering.py"),
    ("test_privacy_dispatcher.py", "privacy/test_dispatcher.py"),
])
def test_the_rule_names_the_room_and_drops_the_rooms_own_prefix(flat: str, placed: str) -> None:
    assert rooms.place(flat) == placed


def test_the_rule_refuses_a_prefix_it_has_no_room_for_and_says_where_to_add_it() -> None:
    with pytest.raises(ValueError, match=r"test_zebra_stripes.py: no room for the prefix 'zebra'; add it to "
                                         r"PREFIXES or EXACT in scripts/unit_rooms.py"):
        rooms.place("test_zebra_stripes.py")


def test_every_cited_unit_test_path_exists() -> None:
    tracked = subprocess.run(["git", "ls-files"], cwd=REPO, capture_output=True, text=True, check=True).stdout.split()
    cited = re.compile(r"tests/unit/[\w/]+\.py")
    missing = []
    for name in tracked:
        path = REPO / name
        if path.suffix not in (".py", ".md", ".toml", ".sh", "") or not path.is_file():
            continue
        for line_no, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
            missing += [f"{name}:{line_no}: {m}" for m in cited.findall(line) if not (REPO / m).is_file()]
    assert not missing, ("paths citing unit tests that do not exist (a moved test: "
                         "`scripts/unit_rooms.py --apply` rewrites flat ones to their room):\n" + "\n".join(missing))
