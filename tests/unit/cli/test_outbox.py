"""`runfacts outbox install|status|unpark` on a SQLite outbox."""

from __future__ import annotations

import json
import sqlite3

from outbox_support import AvroEncoder, DemoEvent
from typer.testing import CliRunner

from runfacts.cli import app
from runfacts.cli.platform.outbox import relay_settings
from runfacts.connectors.outbox import Outbox
from runfacts.connectors.outbox.store import OutboxStore

runner = CliRunner()


def test_status_reports_pending_rows_and_parked_runs_when_outbox_has_backlog(tmp_path):
    db = str(tmp_path / "s.db")
    assert runner.invoke(app, ["outbox", "install", "--db", db]).exit_code == 0
    box = Outbox(AvroEncoder("t"))
    with box.transaction(sqlite3.connect(db)) as tx:
        tx.emit(DemoEvent("e1", "A", 1))
        tx.emit(DemoEvent("e2", "B", 1))
    store = OutboxStore.open(db, "runfacts_outbox")
    store.park(store.fetch_pending(10)[1], "MSG_SIZE_TOO_LARGE: big",
               store.try_acquire("r1", 10))
    result = runner.invoke(app, ["outbox", "status", "--db", db])
    report = json.loads(result.output)
    assert report["pending"] == 2 and report["lease"]["token"] == 1
    assert [(p["run_id"], p["event_id"]) for p in report["parked"]] == [("B", "e2")]


def test_unpark_exits_nonzero_when_run_was_not_parked_and_zero_when_it_was(tmp_path):
    db = str(tmp_path / "s.db")
    runner.invoke(app, ["outbox", "install", "--db", db])
    missing = runner.invoke(app, ["outbox", "unpark", "--db", db, "run-x"])
    assert missing.exit_code == 1 and "was not parked" in missing.output
    store = OutboxStore.open(db, "runfacts_outbox")
    with Outbox(AvroEncoder("t")).transaction(sqlite3.connect(db)) as tx:
        tx.emit(DemoEvent("e1", "run-x", 1))
    store.park(store.fetch_pending(1)[0], "boom", store.try_acquire("r1", 10))
    done = runner.invoke(app, ["outbox", "unpark", "--db", db, "run-x"])
    assert done.exit_code == 0 and store.parked() == []


def test_relay_settings_take_sasl_options_and_prefix_from_the_cluster_settings(monkeypatch, tmp_path):
    props = tmp_path / "client.properties"
    props.write_text("ssl.ca.location=/etc/ca.pem\n")
    monkeypatch.setenv("RUNFACTS_KAFKA_BOOTSTRAP_SERVERS", "kafka.internal:9096")
    monkeypatch.setenv("RUNFACTS_KAFKA_PROPERTIES", str(props))
    monkeypatch.setenv("RUNFACTS_KAFKA_CONFIG", '{"security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-512"}')
    monkeypatch.setenv("RUNFACTS_KAFKA_TOPIC_PREFIX", "acme")
    settings = relay_settings(db="h.db")
    conf = settings.publisher("0123abcd4567").producer_config()
    assert conf["bootstrap.servers"] == "kafka.internal:9096"
    assert (conf["security.protocol"], conf["sasl.mechanism"]) == ("SASL_SSL", "SCRAM-SHA-512")
    assert conf["ssl.ca.location"] == "/etc/ca.pem"
    assert conf["transactional.id"] == "acme-outbox-runfacts_outbox-0123abcd4567"
    assert relay_settings(bootstrap="other:9092", db="h.db").publisher("x").producer_config()[
        "bootstrap.servers"] == "other:9092"
