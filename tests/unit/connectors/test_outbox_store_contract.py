"""The packaged SQLite outbox dialect keeps the outbox's rules (runfacts.testing.OutboxStoreContract),
and a dialect that breaks one fails the suite."""

from __future__ import annotations

import shutil
import sqlite3
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from runfacts.connectors.outbox.sql import Sql, dialect_of
from runfacts.testing import OutboxStoreContract


class SqliteOutbox(OutboxStoreContract):
    def connect(self) -> Any:
        if not hasattr(self, "path"):  # pytest makes one instance per test: one database each
            self.path = str(Path(tempfile.mkdtemp(prefix="outbox-contract-")) / "service.db")
        return sqlite3.connect(self.path, isolation_level=None, timeout=30, check_same_thread=False)

    def teardown_method(self, method: Any = None) -> None:
        super().teardown_method(method)
        shutil.rmtree(Path(self.path).parent, ignore_errors=True)


class TestSqliteOutboxKeepsTheRules(SqliteOutbox):
    """Every rule, on the packaged SQLite dialect."""


@dataclass(frozen=True)
class LeaseNeverHeld(Sql):
    """A dialect whose lease can be taken while another relay holds it (no expiry check)."""

    def lease_acquire(self) -> str:
        return self.q(f"UPDATE {self.base}_lease SET holder = %s, token = token + 1, "
                      f"expires_at = {self.later()} WHERE name = 'relay' RETURNING token")


@dataclass(frozen=True)
class MarksAnyStatus(Sql):
    """A dialect that marks rows without checking they are pending (a row is 'published' twice)."""

    def mark(self, count: int) -> str:
        return self.q(f"UPDATE {self.base} SET status = 1, published_at = {self.now} "
                      f"WHERE seq IN ({', '.join(['?'] * count)})")


class BrokenLease(SqliteOutbox):
    __test__ = False

    def sql(self, conn: Any, table: str) -> Sql:
        return LeaseNeverHeld(dialect_of(conn), table)


class BrokenMark(SqliteOutbox):
    __test__ = False

    def sql(self, conn: Any, table: str) -> Sql:
        return MarksAnyStatus(dialect_of(conn), table)


def run_rule(suite: type[SqliteOutbox], test: str) -> None:
    case = suite()
    case.setup_method()
    try:
        getattr(case, test)()
    finally:
        case.teardown_method()


def test_a_dialect_that_lets_two_relays_hold_the_lease_fails_rule_7() -> None:
    with pytest.raises(AssertionError, match="rule 7: a held lease was taken"):
        run_rule(BrokenLease, "test_one_relay_holds_the_lease_until_it_expires")


def test_a_dialect_that_marks_a_row_twice_fails_rule_5() -> None:
    with pytest.raises(AssertionError, match="rule 5: a row was marked twice"):
        run_rule(BrokenMark, "test_a_marked_row_is_never_fetched_again_and_an_unmarked_one_comes_back")


def test_the_broken_dialects_keep_every_other_rule() -> None:
    """The failures above are the rule each breaks, not a broken harness."""
    run_rule(BrokenLease, "test_a_record_commits_with_the_business_row_and_is_hidden_until_then")
    run_rule(BrokenMark, "test_pending_rows_come_in_seq_order_up_to_the_limit")


def test_the_docs_example_runs_the_suite(tmp_path: Path) -> None:
    import re
    import subprocess
    import sys

    doc = (Path(__file__).resolve().parents[3] / "docs" / "decisions" / "0007-outbox.md").read_text()
    section = doc.split("## Holding a store dialect to the rules", 1)[1]
    (tmp_path / "test_my_outbox.py").write_text(re.findall(r"```python\n(.*?)```", section, re.S)[0])
    run = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:randomly", "-p", "no:cacheprovider",
                          str(tmp_path / "test_my_outbox.py")], capture_output=True, text=True, cwd=tmp_path)
    assert "11 passed" in run.stdout, run.stdout + run.stderr
