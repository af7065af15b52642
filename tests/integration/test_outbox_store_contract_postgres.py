"""The packaged PostgreSQL outbox dialect keeps the outbox's rules (runfacts.testing.OutboxStoreContract)
on a real server, and a dialect without the run lock fails rule 4 (seq order is commit order)."""

from __future__ import annotations

import os
from dataclasses import dataclass
from functools import cache
from typing import Any

import psycopg
import pytest

from runfacts.connectors.outbox.sql import Sql, dialect_of
from runfacts.testing import OutboxStoreContract

pytestmark = [pytest.mark.integration, pytest.mark.postgres]


@cache
def dsn() -> str:
    """$RUNFACTS_PG_DSN, or the local server of scripts/postgres.sh (as the postgres_dsn fixture)."""
    configured = os.environ.get("RUNFACTS_PG_DSN")
    if configured:
        return configured
    from runfacts.dev.services import LocalPostgres

    return LocalPostgres().start()


class PostgresOutbox(OutboxStoreContract):
    def connect(self) -> Any:
        return psycopg.connect(dsn(), autocommit=True)


class TestPostgresOutboxKeepsTheRules(PostgresOutbox):
    """Every rule, on the packaged PostgreSQL dialect."""


@dataclass(frozen=True)
class NoRunLock(Sql):
    """A dialect that takes no per-run lock: two writers of one run commit in either order."""

    def run_lock(self) -> str:
        return "SELECT %s"


class WithoutRunLock(PostgresOutbox):
    __test__ = False

    def sql(self, conn: Any, table: str) -> Sql:
        return NoRunLock(dialect_of(conn), table)


def run_rule(test: str) -> None:
    case = WithoutRunLock()
    case.setup_method()
    try:
        getattr(case, test)()
    finally:
        case.teardown_method()


def test_a_dialect_without_the_run_lock_fails_rule_4() -> None:
    with pytest.raises(AssertionError, match="rule 4: pending order"):
        run_rule("test_within_a_run_seq_order_is_commit_order_when_two_connections_write_it")
    run_rule("test_pending_rows_come_in_seq_order_up_to_the_limit")  # the other rules still hold
