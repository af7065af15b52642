"""docs/security.md's table of ACLs per component says what `component_access` grants."""

from __future__ import annotations

import re
from pathlib import Path

from runfacts.security.acls import component_access
from runfacts.topics import TopicNames

DOC = Path(__file__).resolve().parents[3] / "docs" / "security.md"
HEADER = "| component | reads | writes | prefixed group"


def _short(prefix: str, topic: str) -> str:
    name = topic.removeprefix(prefix + ".")
    return name.removeprefix("run.")


def _cell(text: str) -> set[str]:
    text = re.sub(r"\([^)]*\)", "", text)
    return {t.strip() for t in text.split(",") if t.strip() not in ("", "—")}


def _doc_rows() -> dict[str, tuple[set[str], set[str]]]:
    lines = DOC.read_text().splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(HEADER))
    rows = {}
    for line in lines[start + 2:]:
        if not line.startswith("|"):
            break
        component, reads, writes, _ = (c.strip() for c in line.strip("|").split("|"))
        rows[component] = (_cell(reads), _cell(writes))
    return rows


def test_the_security_docs_acl_table_lists_every_component_with_the_topics_it_is_granted() -> None:
    names = TopicNames("p")
    granted = {a.component: ({_short("p", t) for t in a.reads}, {_short("p", t) for t in a.writes})
               for a in component_access(names)}
    assert _doc_rows() == granted
