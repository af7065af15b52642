"""docs/extending.md stays true: the checklists name tests that exist and paths that exist, and
every test that checks the contract or the tree exhaustively is named in them.

A test counts as exhaustive when its name says `every` and it reads a whole list the
checklists make you extend: the contract's catalog (`default_catalog`, `COMMAND_CLASSES`,
`EVENT_CLASSES`, the spec's `all_types`), the topic specs (`runfacts_topics`) or the tree's
packages. Tests are found by name anywhere under tests/, so moving test files into rooms
changes nothing here.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
DOC = ROOT / "docs" / "extending.md"
# what an exhaustive test reads: a list the checklists make a contributor extend
WHOLE_LISTS = ("default_catalog", "COMMAND_CLASSES", "EVENT_CLASSES", "all_types(", "runfacts_topics(", "PACKAGES")
NOT_A_PLACE = {
    # the codec's trusted-model copies over every field: no place to touch when adding a type
    "test_trusted_models_share_one_fields_set_and_copies_never_change_it_when_every_field_is_given",
}


def functions_of_tests() -> dict[str, str]:
    """Every test function under tests/: name -> its source and decorators."""
    found: dict[str, str] = {}
    for path in sorted((ROOT / "tests").rglob("*.py")):
        source = path.read_text(encoding="utf-8")
        for node in ast.walk(ast.parse(source)):
            if isinstance(node, ast.FunctionDef) and node.name.startswith("test_"):
                parts = [ast.get_source_segment(source, d) or "" for d in node.decorator_list]
                body = ast.get_source_segment(source, node) or ""
                found[node.name] = found.get(node.name, "") + " ".join(parts) + body
    return found


def named_in_doc(text: str) -> set[str]:
    return set(re.findall(r"`(test_\w+)`", text))


def exhaustive(tests: dict[str, str]) -> set[str]:
    return {name for name, source in tests.items()
            if "every" in name and any(key in source for key in WHOLE_LISTS)} - NOT_A_PLACE


def test_every_test_the_checklists_name_exists() -> None:
    tests = functions_of_tests()
    missing = sorted(named_in_doc(DOC.read_text(encoding="utf-8")) - set(tests))
    assert missing == [], f"docs/extending.md names tests that do not exist (renamed? fix the page): {missing}"


def test_every_exhaustive_test_is_named_in_the_checklists() -> None:
    tests = functions_of_tests()
    unnamed = sorted(exhaustive(tests) - named_in_doc(DOC.read_text(encoding="utf-8")))
    assert unnamed == [], (f"these tests check a whole list a contributor extends; say in docs/extending.md "
                           f"which step they hold: {unnamed}")


def test_every_path_the_checklists_name_exists() -> None:
    text = DOC.read_text(encoding="utf-8")
    paths = {p for p in re.findall(r"`([\w./-]+/[\w./<>-]*)`", text) if "<" not in p}
    missing = sorted(p for p in paths if not (ROOT / p).exists())
    assert missing == [], f"docs/extending.md names paths that do not exist: {missing}"


def test_the_exhaustive_rule_finds_a_new_catalog_test_and_ignores_others() -> None:
    found = exhaustive({
        "test_every_tool_event_has_words": "for e in default_catalog().entries: ...",
        "test_every_row_is_printed": "assert rows",
        "test_speed_over_catalog": "default_catalog()",
    })
    assert found == {"test_every_tool_event_has_words"}


def test_the_page_is_linked_from_the_readme_and_the_architecture_page() -> None:
    for page in ("README.md", "docs/architecture.md"):
        assert "extending.md" in (ROOT / page).read_text(encoding="utf-8"), f"{page} does not link docs/extending.md"
