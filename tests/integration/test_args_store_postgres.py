"""The argument store on PostgreSQL: the same API and tamper checks as on SQLite, a proposal's
arguments in the same PostgreSQL transaction as its outbox row, and a dispatcher on the real
broker reading the arguments from PostgreSQL (no shared file with the harness)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from client_support import AgentStack, agent_stack, approval_of
from decider_support import command

from runfacts.client import Runfacts
from runfacts.connectors.args_store import ArgsStore
from runfacts.connectors.outbox.commands import CommandOutbox
from runfacts.processors.dispatcher.adapters import ArgsMissing, ArgsTampered
from runfacts.processors.policy.retry import args_hash
from runfacts.schemas import commands as cmd
from runfacts.schemas.errors import ConfigError
from runfacts.topics import TopicNames

pytestmark = [pytest.mark.integration, pytest.mark.postgres]


def drop(dsn: str, *tables: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        for table in tables:
            conn.execute(f"DROP TABLE IF EXISTS {table}")


@pytest.fixture
def table(postgres_dsn: str, unique: str) -> Iterator[str]:
    name = f"args_{unique}"
    yield name
    drop(postgres_dsn, name)


def test_put_get_and_tamper_checks_on_postgres(postgres_dsn: str, table: str) -> None:
    store = ArgsStore.open(postgres_dsn, table)
    other = ArgsStore.open(postgres_dsn, table)  # a second process's store: the table exists already
    try:
        arguments = {"orderId": "o-1", "amountMinor": 4200, "currency": "EUR"}
        ref, digest = store.put(arguments)
        assert (ref, digest) == (f"args-{args_hash(arguments)}", args_hash(arguments))
        assert store.put(arguments) == (ref, digest)  # idempotent
        assert other.load_verified(ref, digest) == arguments
        with pytest.raises(ConfigError, match="already holds other arguments"):
            store.put({"orderId": "o-2"}, ref)
        with pytest.raises(ArgsMissing):
            other.get("args-nowhere")
        store.conn.execute(f"UPDATE {table} SET body = %s WHERE args_ref = %s",
                           ('{"amountMinor":999999,"currency":"EUR","orderId":"o-1"}', ref))
        with pytest.raises(ArgsTampered):
            other.load_verified(ref, digest)
    finally:
        store.close()
        other.close()


def test_an_unreachable_postgres_names_the_url_without_its_password() -> None:
    with pytest.raises(ConfigError, match=r"postgresql://u:\*\*\*@127\.0\.0\.1:1/x") as bad:
        ArgsStore.open("postgresql://u:secret@127.0.0.1:1/x?connect_timeout=2")
    assert "secret" not in str(bad.value)


def proposal(run: str, ref: str, digest: str) -> cmd.ProposeToolCall:
    return command(cmd.ProposeToolCall, run=run, toolCallId="call-1", capabilityId="payments.refund",
                   argsHash=digest, argsRef=ref, target="o-1", action="refund", risk="high", summary="refund")


def test_propose_commits_arguments_and_outbox_row_in_one_postgres_transaction(
        postgres_dsn: str, unique: str) -> None:
    box_table = f"ob_{unique}"
    box = CommandOutbox.open(postgres_dsn, TopicNames(f"pa-{unique}"), box_table)
    arguments = {"orderId": f"o-{unique}", "amountMinor": 10, "currency": "EUR"}
    digest = args_hash(arguments)
    try:
        assert isinstance(box.args, ArgsStore) and box.args.pg
        with pytest.raises(RuntimeError), box.outbox.transaction(box.conn):
            box.propose(lambda ref, h: proposal(f"run-{unique}", ref, h), arguments)
            raise RuntimeError("the service failed after the proposal")
        with psycopg.connect(postgres_dsn) as check:
            assert check.execute("SELECT count(*) FROM runfacts_args WHERE args_ref = %s",
                                 (f"args-{digest}",)).fetchone() == (0,)
            assert check.execute(f"SELECT count(*) FROM {box_table}").fetchone() == (0,)
        stored = box.propose(lambda ref, h: proposal(f"run-{unique}", ref, h),
                             arguments)
        with psycopg.connect(postgres_dsn) as check:
            assert check.execute("SELECT args_hash FROM runfacts_args WHERE args_ref = %s",
                                 (stored.ref,)).fetchone() == (digest,)
            assert check.execute(f"SELECT count(*) FROM {box_table}").fetchone() == (1,)
    finally:
        box.close()
        with psycopg.connect(postgres_dsn, autocommit=True) as conn:
            conn.execute("DELETE FROM runfacts_args WHERE args_ref = %s", (f"args-{digest}",))
        drop(postgres_dsn, box_table, f"{box_table}_lease", f"{box_table}_parked")


@pytest.fixture(scope="module")
def pg_stack(kafka_bootstrap: str, postgres_dsn: str,
             tmp_path_factory: pytest.TempPathFactory) -> Iterator[AgentStack]:
    with agent_stack(kafka_bootstrap, tmp_path_factory.mktemp("pgargs"), approval_ttl_ms=120_000,
                     args_db=postgres_dsn) as running:
        yield running




def test_a_dispatcher_reads_the_arguments_from_postgres_written_with_the_outbox_row(
        pg_stack: AgentStack, postgres_dsn: str, unique: str) -> None:
    table = f"cl_ob_{unique}"
    assert not Path(pg_stack.args_store).exists()  # nothing shares the harness's file
    with pytest.raises(ConfigError, match="--args-store"):
        Runfacts.connect(kafka=pg_stack.options.kafka, prefix=pg_stack.names.prefix, outbox=postgres_dsn,
                         outbox_table=table, args_store=pg_stack.dir / "elsewhere.db")
    svc = pg_stack.client(outbox=postgres_dsn, outbox_table=table, args_store=None)
    order = f"order-{uuid.uuid4().hex[:8]}"
    try:
        run = svc.start_run(goal="ticket:T-7001", summary="Refund", user_id="customer-42", run_id=f"pga-{unique}")
        call = run.propose("payments.refund", {"orderId": order, "amountMinor": 1234, "currency": "EUR"},
                           target=order)
        svc.decide(approval_of(svc, run.id), "approve", approver="alice", timeout=90)
        value = call.result(timeout=120)
        [refund] = [r for r in pg_stack.ledger() if r["orderId"] == order]
        assert value["refundId"] == refund["refundId"] and refund["amountMinor"] == 1234
    finally:
        svc.close()
        drop(postgres_dsn, table, f"{table}_lease", f"{table}_parked")
