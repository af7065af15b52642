"""The relay's identity on the real broker: relays of two databases side by side never fence
each other, a restart on the same database fences its predecessor; and a relay pointed at a
database without the outbox tables says how to install them (one line, exit 2)."""

from __future__ import annotations

import logging
import sqlite3
import subprocess
import sys
import threading
import uuid

import pytest
from outbox_support import AvroEncoder, DemoEvent, consume, create_topic, drop_outbox

from runfacts.connectors.outbox import Outbox
from runfacts.connectors.outbox.store import OutboxRow, OutboxStore
from runfacts.connectors.relay import Relay, RelaySettings
from runfacts.connectors.relay.publisher import KafkaPublisher
from runfacts.schemas.errors import InfrastructureError

pytestmark = pytest.mark.integration


def _fill(path: str, topic: str, host: str, runs: int, per_run: int) -> None:
    box = Outbox(AvroEncoder(topic))
    conn = sqlite3.connect(path)
    box.install(conn)
    for n in range(per_run):
        with box.transaction(conn) as tx:
            for r in range(runs):
                tx.emit(DemoEvent(f"{host}-e{r}-{n}", f"{host}-run{r}", n))
    conn.close()


def _transactional_id(settings: RelaySettings) -> str:
    relay = Relay(settings)
    try:
        return relay.settings.publisher(relay.relay_id).transactional_id
    finally:
        relay.close()


def test_relays_of_two_databases_never_fence_each_other_and_a_restart_fences_its_predecessor(
        tmp_path, kafka_bootstrap, unique, caplog):
    topic = f"test.relayid.{unique}"
    create_topic(kafka_bootstrap, topic)
    hosts = {"a": str(tmp_path / "a" / "harness.db"), "b": str(tmp_path / "b" / "harness.db")}
    for host, path in hosts.items():
        (tmp_path / host).mkdir()
        _fill(path, topic, host, runs=10, per_run=60)  # 600 rows each, 12 transactions of 50
    settings = {host: RelaySettings(db=path, bootstrap=kafka_bootstrap, batch_size=50,
                                    poll_interval_s=0.1, exit_when_idle=True)
                for host, path in hosts.items()}
    tids = {host: _transactional_id(s) for host, s in settings.items()}
    assert tids["a"] != tids["b"]
    assert tids["a"] == _transactional_id(settings["a"])  # stable across restarts
    assert tids["a"].startswith("runfacts-outbox-runfacts_outbox-")
    store = OutboxStore.open(hosts["a"], "runfacts_outbox")
    predecessor = KafkaPublisher(settings["a"].publisher(store.relay_id()))  # a's relay before a restart
    store.close()

    relays = [Relay(s) for s in settings.values()]
    caplog.set_level(logging.WARNING, logger="runfacts.relay")
    threads = [threading.Thread(target=r.run, daemon=True) for r in relays]
    for t in threads:
        t.start()
    for t in threads:
        t.join(90)
    assert not any(t.is_alive() for t in threads)

    warnings = [r.getMessage() for r in caplog.records if r.name == "runfacts.relay"]
    assert warnings == []  # not one fenced (or otherwise failed) transaction
    assert [r.published_total for r in relays] == [600, 600]
    assert len({rec.event_id for rec in consume(kafka_bootstrap, topic, 1200)}) == 1200
    row = OutboxRow(1, "late", "a-run0", topic, b"x", "[]", 0.0)
    with pytest.raises(InfrastructureError, match="FENCED"):
        predecessor.publish([row])  # the restarted relay of database a fenced it


def _relay_cli(db: str, *extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "runfacts.cli", "outbox", "relay", "--db", db,
                           "--exit-when-idle", *extra], capture_output=True, text=True, timeout=60,
                          check=False)


def _assert_names_install(result: subprocess.CompletedProcess[str], fix: str) -> None:
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in result.stderr, result.stderr
    assert fix in lines[0] and "not installed" in lines[0]


def test_relay_names_the_install_command_and_exits_2_when_sqlite_outbox_is_missing(tmp_path):
    db = str(tmp_path / "empty.db")
    _assert_names_install(_relay_cli(db), f"runfacts outbox install --db {db}")
    other = _relay_cli(db, "--table", "jobs_outbox")
    _assert_names_install(other, f"runfacts outbox install --db {db} --table jobs_outbox")


@pytest.mark.postgres
def test_relay_names_the_install_command_and_exits_2_when_postgres_outbox_is_missing(postgres_dsn):
    table = f"ob_missing_{uuid.uuid4().hex[:8]}"
    try:
        result = _relay_cli(postgres_dsn, "--table", table)
    finally:
        drop_outbox(postgres_dsn, table)
    _assert_names_install(result, f"--table {table}")
    assert "runfacts outbox install --db postgresql://" in result.stderr


def _outbox_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "runfacts.cli", "outbox", *args], capture_output=True, text=True,
                          timeout=60, check=False)


def test_status_and_unpark_name_the_install_command_and_exit_2_when_sqlite_outbox_is_missing(tmp_path):
    db = str(tmp_path / "empty.db")
    _assert_names_install(_outbox_cli("status", "--db", db), f"runfacts outbox install --db {db}")
    _assert_names_install(_outbox_cli("unpark", "--db", db, "run-1", "--table", "jobs_outbox"),
                          f"runfacts outbox install --db {db} --table jobs_outbox")


@pytest.mark.postgres
def test_status_and_unpark_name_the_install_command_and_exit_2_when_postgres_outbox_is_missing(postgres_dsn):
    table = f"ob_missing_{uuid.uuid4().hex[:8]}"
    try:
        status = _outbox_cli("status", "--db", postgres_dsn, "--table", table)
        unpark = _outbox_cli("unpark", "--db", postgres_dsn, "run-1", "--table", table)
    finally:
        drop_outbox(postgres_dsn, table)
    for result in (status, unpark):
        _assert_names_install(result, f"--table {table}")
        assert "runfacts outbox install --db postgresql://" in result.stderr
