"""The consumer-side inbox: seen/mark dedupe by eventId, pruning by retention."""

from __future__ import annotations

import sqlite3

import pytest

from runfacts.connectors.outbox.inbox import Inbox, InboxSettings
from runfacts.schemas.errors import ConfigError


def test_seen_is_false_until_marked_then_true():
    inbox = Inbox(sqlite3.connect(":memory:"))
    assert not inbox.seen("e1")
    assert inbox.mark("e1", 100.0)
    assert inbox.seen("e1")


def test_mark_returns_false_when_event_id_already_marked():
    inbox = Inbox(sqlite3.connect(":memory:"))
    inbox.mark("e1", 100.0)
    assert not inbox.mark("e1", 200.0)
    assert len(inbox) == 1


def test_prune_forgets_only_ids_older_than_retention_when_called():
    inbox = Inbox(sqlite3.connect(":memory:"), InboxSettings(retention_s=60.0))
    inbox.mark("old", 0.0)
    inbox.mark("edge", 40.0)
    inbox.mark("new", 90.0)
    assert inbox.prune(now=100.0) == 1
    assert (inbox.seen("old"), inbox.seen("edge"), inbox.seen("new")) == (False, True, True)


def test_mark_rolls_back_with_consumer_state_when_transaction_fails():
    conn = sqlite3.connect(":memory:")
    conn.execute("CREATE TABLE totals (n INTEGER)")
    inbox = Inbox(conn)
    conn.commit()
    try:
        with conn:
            conn.execute("INSERT INTO totals VALUES (1)")
            inbox.mark("e1", 1.0)
            raise RuntimeError("consumer crashed before commit")
    except RuntimeError:
        pass
    assert not inbox.seen("e1")
    assert conn.execute("SELECT count(*) FROM totals").fetchone() == (0,)


def test_open_persists_marks_when_file_is_reopened(tmp_path):
    path = str(tmp_path / "inbox.db")
    first = Inbox.open(path)
    first.mark("e1", 1.0)
    first.close()
    assert Inbox.open(path).seen("e1")


@pytest.mark.parametrize("settings", [{"retention_s": 0}, {"table": "bad name"}])
def test_settings_raise_config_error_when_values_are_invalid(settings):
    with pytest.raises(ConfigError):
        InboxSettings(**settings)
