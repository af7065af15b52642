"""Docs and code comments cite the decision, not the tracker: "issue 24" means nothing to a reader
outside the team, so a reason is cited by its ADR (docs/decisions/) or the doc section that
explains it. docs/benchmarks.md keeps its history tables as they were written; references to
other projects' trackers (`sdk-python#1890`, a URL's `/issues/…`) do not match the pattern.
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
CITATION = re.compile(r"issues? ?#?[0-9]+", re.IGNORECASE)
SESSION = re.compile(r"\bsession [0-9]+(?![0-9])(?! ?(?:s|ms|seconds?)\b)(?!\.[0-9])", re.IGNORECASE)
"""The team's work sessions ("session 8"): a number is dated by its day and the machine's load
instead. A Kafka session timeout ("session 6 s") is no label."""
SCOPE = ("runfacts", "processors", "projections", "connectors", "schemas", "docs", "examples", "benchmarks",
         "scripts")
FILES = ("README.md", "pyproject.toml", "Makefile")
HISTORY = {"docs/benchmarks.md"}  # the dated history tables, kept as written
SUFFIXES = {".py", ".md", ".toml", ".sh", ".ts", ".txt", ".cfg", ".yaml", ".yml", ""}


def citations() -> list[str]:
    paths = [ROOT / name for name in FILES]
    for folder in SCOPE:
        paths += [p for p in (ROOT / folder).rglob("*") if p.is_file() and p.suffix in SUFFIXES]
    found = []
    for path in sorted(paths):
        rel = path.relative_to(ROOT).as_posix()
        if rel in HISTORY or "__pycache__" in rel or "/avro/" in rel:
            continue
        for number, line in enumerate(path.read_text(encoding="utf-8", errors="replace").splitlines(), 1):
            if CITATION.search(line) or SESSION.search(line):
                found.append(f"{rel}:{number}: {line.strip()[:100]}")
    return found


def test_no_doc_or_comment_cites_an_issue_number() -> None:
    found = citations()
    assert found == [], ("cite the ADR (docs/decisions/) or the doc section that explains the decision, "
                         "not the issue number; date a number by its day, not by a session label:\n"
                         + "\n".join(found))


def test_the_pattern_finds_the_styles_that_were_written_and_spares_other_trackers() -> None:
    for written in ("(issue 24)", "Issue 35 item 2", "issues 18.2, 35", "issue #7", "Issue 34's bars"):
        assert CITATION.search(written), written
    for other in ("openai/openai-agents-python#1890", "github.com/x/y/issues/12", "an issue with retries"):
        assert not CITATION.search(other), other


def test_a_session_label_is_found_and_a_kafka_session_timeout_is_not() -> None:
    for written in ("(session 8, 07:45)", "Session 10 (2026-12-04)", "session 7's rounds"):
        assert SESSION.search(written), written
    for other in ("(session 6 s, transaction 5 s)", "a session 3000 ms", "group session timeout"):
        assert not SESSION.search(other), other
