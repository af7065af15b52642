"""The outbox library on SQLite: emit inside the caller's transaction, validation, rollback."""

from __future__ import annotations

import sqlite3

import pytest
from outbox_support import AvroEncoder, DemoEvent, decode

from runfacts.connectors.outbox.sql import Dialect, Sql, check_table_name, dialect_of
from runfacts.connectors.outbox.writer import EncodedRecord, Outbox, decode_headers
from runfacts.schemas.errors import ConfigError, InvalidInput


@pytest.fixture
def conn(tmp_path) -> sqlite3.Connection:
    db = sqlite3.connect(tmp_path / "service.db")
    db.execute("CREATE TABLE orders (id TEXT PRIMARY KEY, state TEXT)")
    db.commit()
    return db


@pytest.fixture
def outbox(conn) -> Outbox:
    box = Outbox(AvroEncoder("runfacts.run.events"))
    box.install(conn)
    return box


def rows(conn) -> list[tuple]:
    return conn.execute("SELECT event_id, run_id, topic, value, headers, status "
                        "FROM runfacts_outbox ORDER BY seq").fetchall()


def test_emit_commits_row_with_business_write_when_block_succeeds(conn, outbox):
    with outbox.transaction(conn) as tx:
        conn.execute("INSERT INTO orders VALUES ('o1', 'paid')")
        assert tx.emit(DemoEvent("e1", "run-1", 1, "paid"))
    [(event_id, run_id, topic, value, headers, status)] = rows(conn)
    assert (event_id, run_id, topic, status) == ("e1", "run-1", "runfacts.run.events", 0)
    assert decode(value) == {"eventId": "e1", "runId": "run-1", "n": 1, "note": "paid"}
    assert dict(decode_headers(headers)) == {"eventType": b"test.demo.happened",
                                             "eventId": b"e1"}
    assert conn.execute("SELECT state FROM orders").fetchone() == ("paid",)


def test_emit_rolls_back_business_write_when_event_fails_validation(conn, outbox):
    bad = DemoEvent("e1", "run-1", "not-a-number")  # type: ignore[arg-type]
    expected = r"DemoEvent\(event_id='e1'.*failed to encode"
    with pytest.raises(InvalidInput, match=expected), outbox.transaction(conn) as tx:
        conn.execute("INSERT INTO orders VALUES ('o1', 'paid')")
        tx.emit(bad)
    assert rows(conn) == []
    assert conn.execute("SELECT count(*) FROM orders").fetchone() == (0,)


def test_emit_rolls_back_everything_when_business_code_raises_after_emit(conn, outbox):
    with pytest.raises(RuntimeError, match="business failure"), outbox.transaction(conn) as tx:
        tx.emit(DemoEvent("e1", "run-1", 1))
        raise RuntimeError("business failure")
    assert rows(conn) == []


def test_emit_command_targets_commands_topic_when_called_for_a_command(conn, outbox):
    with outbox.transaction(conn) as tx:
        tx.emit_command(DemoEvent("c1", "run-1", 1))
    assert rows(conn)[0][2] == "runfacts.run.commands"


def test_emit_returns_false_when_event_id_already_in_outbox(conn, outbox):
    with outbox.transaction(conn) as tx:
        assert tx.emit(DemoEvent("e1", "run-1", 1))
        assert not tx.emit(DemoEvent("e1", "run-1", 1))
    assert len(rows(conn)) == 1


class _Broken:
    def __init__(self, result: object) -> None:
        self.result = result

    def encode(self, event: object) -> object:
        return self.result


@pytest.mark.parametrize("result, why", [
    ("bytes", "not EncodedRecord"),
    (EncodedRecord("t", "", b"v", "e1"), "without key"),
    (EncodedRecord("t", "run-1", b"v", ""), "without event_id"),
])
def test_emit_raises_invalid_input_when_encoder_output_is_incomplete(conn, result, why):
    box = Outbox(_Broken(result))  # type: ignore[arg-type]
    box.install(conn)
    with pytest.raises(InvalidInput, match=why), box.transaction(conn) as tx:
        tx.emit("the-event")
    assert rows(conn) == []


def test_seq_follows_commit_order_when_transactions_interleave(tmp_path):
    path = tmp_path / "s.db"
    first, second = sqlite3.connect(path), sqlite3.connect(path, timeout=0.05)
    box = Outbox(AvroEncoder("t"))
    box.install(first)
    with box.transaction(first) as tx:
        tx.emit(DemoEvent("a", "run-1", 1))
        locked = pytest.raises(sqlite3.OperationalError, match="locked")
        with locked, box.transaction(second) as other:
            other.emit(DemoEvent("b", "run-1", 2))
    with box.transaction(second) as other:
        other.emit(DemoEvent("b", "run-1", 2))
    assert [r[0] for r in rows(first)] == ["a", "b"]


@pytest.mark.parametrize("name", ["Outbox", "x;drop", "1abc", "", "a" * 49])
def test_table_name_raises_config_error_when_not_a_safe_identifier(name):
    with pytest.raises(ConfigError, match="outbox table"):
        check_table_name(name)


def test_dialect_of_raises_config_error_when_connection_is_unknown():
    with pytest.raises(ConfigError, match="connection"):
        dialect_of(object())


def test_sql_uses_question_marks_when_dialect_is_sqlite():
    assert "%s" not in Sql(Dialect.SQLITE, "ob").insert()
    assert "%s" in Sql(Dialect.POSTGRES, "ob").insert()


def test_transaction_nests_as_savepoint_when_caller_has_a_transaction_open(conn, outbox):
    conn.execute("INSERT INTO orders VALUES ('o1', 'new')")
    with pytest.raises(InvalidInput), outbox.transaction(conn) as tx:
        tx.emit(DemoEvent("e1", "run-1", "bad"))  # type: ignore[arg-type]
    with outbox.transaction(conn) as tx:
        tx.emit(DemoEvent("e2", "run-1", 1))
    assert conn.in_transaction
    conn.rollback()
    assert rows(conn) == []
    assert conn.execute("SELECT count(*) FROM orders").fetchone() == (0,)
