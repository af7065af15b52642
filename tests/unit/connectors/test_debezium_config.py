"""The Debezium connector config for an outbox (pure): columns mapped the way the relay publishes."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from runfacts.connectors.outbox.debezium import PLACEMENT, DebeziumOutbox, PgTarget, slot_name
from runfacts.connectors.outbox.sql import HEADER_COLUMNS, Dialect, Sql, header_values
from runfacts.schemas import codec
from runfacts.schemas.errors import ConfigError

DSN = "postgresql://runfacts:s3cr%40t@db.internal:6543/harness?sslmode=require"


def test_config_maps_the_outbox_columns_to_the_relays_record():
    config = DebeziumOutbox(DSN, "runfacts", table="jobs_outbox").config()
    assert config["connector.class"] == "io.debezium.connector.postgresql.PostgresConnector"
    assert (config["database.hostname"], config["database.port"], config["database.user"],
            config["database.password"], config["database.dbname"]) == ("db.internal", "6543", "runfacts",
                                                                          "s3cr@t", "harness")
    assert config["database.sslmode"] == "require"
    assert config["table.include.list"] == "public.jobs_outbox"
    assert config["plugin.name"] == "pgoutput"
    # key = run_id as UTF-8, value = the bytea unchanged, headers as UTF-8 text
    assert config["transforms.outbox.type"] == "io.debezium.transforms.outbox.EventRouter"
    assert config["transforms.outbox.table.field.event.key"] == "run_id"
    assert config["transforms.outbox.table.field.event.payload"] == "value"
    assert config["transforms.outbox.table.field.event.id"] == "event_id"
    assert config["transforms.outbox.route.by.field"] == "topic"
    assert config["transforms.outbox.route.topic.replacement"] == "${routedByValue}"
    assert config["binary.handling.mode"] == "bytes"
    assert config["value.converter"] == "org.apache.kafka.connect.converters.ByteArrayConverter"
    assert config["key.converter"] == config["header.converter"] == "org.apache.kafka.connect.storage.StringConverter"
    # no headers the relay does not publish: Debezium's id and context headers are off
    assert config["transforms"] == "outbox,dropid" and config["transforms.dropid.headers"] == "id"
    assert config["extended.headers.enabled"] == "false"


def test_placement_puts_the_command_headers_in_the_relays_order():
    placement = DebeziumOutbox(DSN, "runfacts").config()["transforms.outbox.table.fields.additional.placement"]
    pairs = [tuple(p.split(":")) for p in placement.split(",")]
    assert [(column, where) for column, where, _ in pairs][:4] == [
        ("command_type", "header"), ("schema_version", "header"), ("command_id", "header"), ("event_id", "header")]
    headers = [header for _, _, header in pairs]
    assert headers == ["commandType", "schemaVersion", "commandId", "eventId", "traceparent", "tracestate"]
    # every placed column is one the PostgreSQL outbox table has
    table = Sql(Dialect.POSTGRES, "runfacts_outbox").ddl()[0]
    assert {column for column, _, _ in pairs} <= {c for _, c in HEADER_COLUMNS} | {"event_id"}
    assert all(f"{column} text" in table for _, column in HEADER_COLUMNS)


def test_the_header_columns_hold_what_the_codec_puts_in_the_relays_headers():
    from decider_support import create

    command = create()
    values = dict(zip([c for _, c in HEADER_COLUMNS], header_values(codec.headers(command)), strict=True))
    assert values["command_type"] == "run.create"
    assert values["command_id"] == command.commandId
    assert values["schema_version"] == dict(codec.headers(command))["schemaVersion"].decode()
    assert values["event_type"] is None and values["traceparent"] is None
    trace = header_values([("traceparent", b"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01")])
    assert trace[[c for _, c in HEADER_COLUMNS].index("traceparent")].startswith("00-0af7")


def test_an_events_outbox_places_the_event_headers():
    placement = DebeziumOutbox(DSN, "runfacts", kind="events").config()[
        "transforms.outbox.table.fields.additional.placement"]
    assert placement.split(",")[0] == "event_type:header:eventType"
    assert "commandType" not in placement
    assert set(PLACEMENT) == {"commands", "events"}


def test_slot_names_are_safe_stable_and_distinct():
    assert slot_name("runfacts", "runfacts_outbox") == "rf_runfacts_runfacts_outbox"
    assert slot_name("Demo-1.x", "ob") == "rf_demo_1_x_ob"
    long = slot_name("p" * 40, "t" * 40)
    assert len(long) <= 63 and long == slot_name("p" * 40, "t" * 40)
    assert long != slot_name("p" * 40, "t" * 39 + "u")
    config = DebeziumOutbox(DSN, "runfacts").config()
    assert config["publication.name"] == config["slot.name"] + "_pub"


@pytest.mark.parametrize(("kwargs", "option"), [
    ({"dsn": "harness.db"}, "--dsn"),
    ({"dsn": "postgresql://127.0.0.1:5432/runfacts"}, "--dsn"),  # no user
    ({"prefix": ""}, "--prefix"),
    ({"kind": "facts"}, "--kind"),
    ({"snapshot": "always"}, "--snapshot"),
    ({"table": "Bad-Name"}, "outbox table"),
])
def test_bad_input_is_refused_naming_the_option(kwargs, option):
    args = {"dsn": DSN, "prefix": "runfacts", **kwargs}
    with pytest.raises(ConfigError, match=option):
        DebeziumOutbox(**args)


def test_a_bad_dsn_is_shown_with_its_password_masked():
    with pytest.raises(ConfigError) as info:
        PgTarget.from_dsn("mysql://u:hunter2@h/db")
    assert "hunter2" not in str(info.value)


def test_cli_prints_the_builders_connector_and_exits_2_on_bad_input():
    ok = subprocess.run([sys.executable, "-m", "runfacts.cli", "outbox", "debezium-config", "--dsn", DSN,
                         "--prefix", "runfacts", "--table", "jobs_outbox"], capture_output=True, text=True,
                        timeout=60, check=False)
    assert ok.returncode == 0, ok.stderr
    assert json.loads(ok.stdout) == DebeziumOutbox(DSN, "runfacts", table="jobs_outbox").connector()
    bad = subprocess.run([sys.executable, "-m", "runfacts.cli", "outbox", "debezium-config", "--dsn", "h.db",
                          "--prefix", "runfacts"], capture_output=True, text=True, timeout=60, check=False)
    assert bad.returncode == 2 and "postgresql://" in bad.stderr and "Traceback" not in bad.stderr
