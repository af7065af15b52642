"""Debezium on Kafka Connect publishes a PostgreSQL outbox instead of the relay (real Connect,
real Debezium, real PostgreSQL, real broker).

Oracle: the same commands written through two outboxes, one published by the built-in relay and
one by Debezium, give records equal where the decider looks (partition, key, value, every header
with a value) and, through the real decider, the same events (the same fold), the same dead
letter for a row that is not a command.
"""

from __future__ import annotations

import subprocess
import sys
from dataclasses import replace
from datetime import datetime
from pathlib import Path
from typing import Any

import psycopg
import pytest
from debezium_support import drop_capture, kafka_connect, require_logical  # noqa: F401
from decider_support import CTX, claim, command, completed, create, propose_refund, resume, unknown
from engine_support import EngineThread, read_all, settings
from outbox_support import drop_outbox

from runfacts.connectors.outbox.commands import CommandOutbox
from runfacts.connectors.outbox.debezium import DebeziumOutbox
from runfacts.connectors.outbox.store import OutboxStore
from runfacts.connectors.outbox.writer import EncodedRecord
from runfacts.connectors.relay import Relay, RelaySettings
from runfacts.processors.decider.app import DeciderShell
from runfacts.processors.decider.evolve import fold
from runfacts.schemas import codec
from runfacts.schemas import commands as cmd
from runfacts.schemas.errors import ConfigError
from runfacts.settings import KafkaSettings
from runfacts.topics import TopicNames, apply_topics, runfacts_topics

pytestmark = [pytest.mark.integration, pytest.mark.postgres]


def _commands(run: str) -> list[cmd.CommandBase]:
    return [create(run=run), propose_refund(run=run), resume(run=run), claim(run=run), unknown(run=run),
            command(cmd.ReportReconciled, run=run, toolCallId="tool-call-031",
                    externalRequestId="payment-request-tool-call-031-1", outcome="found_completed"),
            completed(run=run)]


GARBAGE = EncodedRecord("", "run-garbage", b"\xc3\x01 this is not a command", "garbage-1",
                        (("commandType", b"run.create"), ("schemaVersion", b"1")))


def _write(dsn: str, names: TopicNames, table: str, commands: list) -> None:
    outbox = CommandOutbox(psycopg.connect(dsn, autocommit=True), names, table)
    try:
        outbox.send(*commands)
        with outbox.outbox.transaction(outbox.conn) as tx:
            tx.emit_record(replace(GARBAGE, topic=names.commands))
    finally:
        outbox.close()


def _visible(msg) -> tuple:
    """What the decider can see of a record: partition, key, value, headers that have a value."""
    return (msg.partition(), msg.key(), msg.value(), [(k, v) for k, v in (msg.headers() or []) if v is not None])


def _timeless(value: Any) -> Any:
    """`value` with every timestamp blanked: the decider stamps what it decides with its clock."""
    if isinstance(value, datetime):
        return "<time>"
    if isinstance(value, dict):
        return {k: _timeless(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_timeless(v) for v in value]
    return value


def _wait_records(bootstrap: str, topic: str, count: int, timeout: float = 90) -> list:
    import time

    deadline = time.monotonic() + timeout
    while True:
        records = read_all(bootstrap, topic, timeout=3)
        if len(records) >= count or time.monotonic() > deadline:
            return records


def _decide(bootstrap: str, names: TopicNames, state_dir: Path, expected_dead: int) -> tuple[list, list]:
    """Run the real decider over the commands topic until the dead letters arrived; events, dlq."""
    engine = EngineThread(DeciderShell(names, CTX).application(),
                          settings(bootstrap, state_dir, f"dec-{names.prefix}")).start()
    try:
        engine.wait_until(lambda: len(read_all(bootstrap, names.dlq, timeout=1)) >= expected_dead, 90)
        engine.wait_until(lambda: bool(read_all(bootstrap, names.state, timeout=1)), 30)
    finally:
        engine.stop()
    return ([codec.decode(m.value()) for m in read_all(bootstrap, names.events)],
            read_all(bootstrap, names.dlq))


def test_debezium_publishes_what_the_relay_publishes_and_the_decider_decides_the_same(
        kafka_connect, kafka_bootstrap, postgres_dsn, unique, tmp_path):  # noqa: F811
    require_logical(postgres_dsn)
    runs = [f"run-dbz-{unique}-{i}" for i in range(3)]
    commands = [c for run in runs for c in _commands(run)]
    by_relay, by_debezium = TopicNames(f"dbzr{unique}"), TopicNames(f"dbzd{unique}")
    for names in (by_relay, by_debezium):
        apply_topics(KafkaSettings(bootstrap_servers=kafka_bootstrap), runfacts_topics(names))
    relay_table, cdc_table = f"ob_relay_{unique}", f"ob_cdc_{unique}"
    connector = DebeziumOutbox(postgres_dsn, by_debezium.prefix, table=cdc_table)
    try:
        _write(postgres_dsn, by_relay, relay_table, commands)
        _write(postgres_dsn, by_debezium, cdc_table, commands)
        Relay(RelaySettings(db=postgres_dsn, bootstrap=kafka_bootstrap, table=relay_table,
                            exit_when_idle=True, poll_interval_s=0.1)).run()
        # as an operator does it (CLI -> file -> scripts/kafka-connect.sh apply); the initial
        # snapshot publishes the rows already written, then the connector streams the WAL
        kafka_connect.apply_as_operator(connector, tmp_path)

        expected = len(commands) + 1
        relayed = read_all(kafka_bootstrap, by_relay.commands)
        captured = _wait_records(kafka_bootstrap, by_debezium.commands, expected)
        assert len(relayed) == len(captured) == expected
        order = {m.value(): i for i, m in enumerate(sorted(relayed, key=lambda m: (m.partition(), m.offset())))}
        assert sorted(map(_visible, captured), key=lambda v: order[v[2]]) == \
            sorted(map(_visible, relayed), key=lambda v: order[v[2]])
        # per partition, the same order
        for p in {m.partition() for m in relayed}:
            assert [m.value() for m in captured if m.partition() == p] == \
                [m.value() for m in relayed if m.partition() == p]

        relay_events, relay_dlq = _decide(kafka_bootstrap, by_relay, tmp_path / "r", 1)
        cdc_events, cdc_dlq = _decide(kafka_bootstrap, by_debezium, tmp_path / "d", 1)
        assert len(relay_events) == len(cdc_events) > len(commands)
        for run in runs:
            mine = [e for e in relay_events if e.runId == run]
            theirs = [e for e in cdc_events if e.runId == run]
            assert [e.eventType for e in theirs] == [e.eventType for e in mine]
            assert _timeless(fold(None, theirs).model_dump()) == _timeless(fold(None, mine).model_dump())
        # the row that is not a command: dead-lettered by the decider with its reason, as with the relay
        (relay_dead,), (cdc_dead,) = relay_dlq, cdc_dlq
        assert cdc_dead.value() == relay_dead.value() == GARBAGE.value
        reason = dict(cdc_dead.headers())["dlq.error"]
        assert reason and reason == dict(relay_dead.headers())["dlq.error"]
    finally:
        kafka_connect.delete(connector.connector_name)
        drop_capture(postgres_dsn, connector)
        drop_outbox(postgres_dsn, relay_table)


def test_an_outbox_made_before_the_header_columns_gets_them_and_prune_needs_the_slot(postgres_dsn, unique):
    require_logical(postgres_dsn)
    table = f"ob_old_{unique}"
    connector = DebeziumOutbox(postgres_dsn, "runfacts", table=table)
    with psycopg.connect(postgres_dsn, autocommit=True) as conn:  # the outbox as shipped before
        conn.execute(f"CREATE TABLE {table} (seq bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, "
                     "event_id text NOT NULL, run_id text NOT NULL, topic text NOT NULL, value bytea NOT NULL, "
                     "headers text NOT NULL, created_at timestamptz NOT NULL DEFAULT clock_timestamp(), "
                     "status smallint NOT NULL DEFAULT 0, published_at timestamptz)")
        conn.execute(f"CREATE UNIQUE INDEX {table}_event_id ON {table} (event_id)")
        conn.execute(f"INSERT INTO {table} (event_id, run_id, topic, value, headers) "
                     "VALUES ('old', 'r', 't', '', '[]')")
    try:
        command_ = create(run=f"run-old-{unique}")
        _write_one = CommandOutbox(psycopg.connect(postgres_dsn, autocommit=True), TopicNames("runfacts"), table)
        _write_one.send(command_)
        _write_one.close()
        with psycopg.connect(postgres_dsn) as conn:
            rows = conn.execute(f"SELECT event_id, command_type, schema_version, command_id FROM {table} "
                                "ORDER BY seq").fetchall()
        assert rows == [("old", None, None, None),
                        (command_.commandId, "run.create", dict(codec.headers(command_))["schemaVersion"].decode(),
                         command_.commandId)]
        store = OutboxStore.open(postgres_dsn, table)
        with pytest.raises(ConfigError, match=f"no pgoutput replication slot {connector.slot}"):
            store.prune_captured(connector.slot, f"{connector.slot}_pub", 0)
        with psycopg.connect(postgres_dsn, autocommit=True) as conn:
            conn.execute(f"CREATE PUBLICATION {connector.slot}_pub FOR TABLE {table}")
            conn.execute("SELECT pg_create_logical_replication_slot(%s, 'pgoutput')", (connector.slot,))
        assert store.prune_captured(connector.slot, f"{connector.slot}_pub", 3600) == 0  # nothing that old
        assert store.prune_captured(connector.slot, f"{connector.slot}_pub", 0, chunk=1) == 2
        store.close()
        # the operator's command: one line and exit 2 naming the slot it lacks, else the count
        missing = _prune_cli(postgres_dsn, "--prefix", "nobody", "--table", table)
        assert missing.returncode == 2 and "no pgoutput replication slot rf_nobody_" in missing.stderr
        assert len(missing.stderr.strip().splitlines()) == 1
        done = _prune_cli(postgres_dsn, "--prefix", "runfacts", "--table", table, "--older-than", "0")
        assert done.returncode == 0 and f"outbox {table}: 0 rows pruned" in done.stdout, done.stderr
    finally:
        drop_capture(postgres_dsn, connector)


def _prune_cli(dsn: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "runfacts.cli", "outbox", "prune", "--db", dsn, *args],
                          capture_output=True, text=True, timeout=60, check=False)


def test_prune_refuses_a_publication_that_does_not_cover_the_table(postgres_dsn, unique):
    require_logical(postgres_dsn)
    table, other = f"ob_pr_{unique}", f"ob_other_{unique}"
    connector = DebeziumOutbox(postgres_dsn, "runfacts", table=table)
    CommandOutbox(psycopg.connect(postgres_dsn, autocommit=True), TopicNames("runfacts"), other).close()
    CommandOutbox(psycopg.connect(postgres_dsn, autocommit=True), TopicNames("runfacts"), table).close()
    try:
        with psycopg.connect(postgres_dsn, autocommit=True) as conn:
            conn.execute(f"CREATE PUBLICATION {connector.slot}_pub FOR TABLE {other}")
            conn.execute("SELECT pg_create_logical_replication_slot(%s, 'pgoutput')", (connector.slot,))
        store = OutboxStore.open(postgres_dsn, table)
        with pytest.raises(ConfigError, match=f"does not cover {table}"):
            store.prune_captured(connector.slot, f"{connector.slot}_pub", 0)
        store.close()
    finally:
        drop_capture(postgres_dsn, connector)
        drop_outbox(postgres_dsn, other)

