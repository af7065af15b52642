"""A downstream MCP server's tools as runfacts adapters: the official SDK's server as a real
stdio process (tests/mcp_servers/ledger_server.py), no broker (the adapter port only)."""

from __future__ import annotations

import json
import os
import socket
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from runfacts.mcp import mcp_registry, parse_manifest
from runfacts.processors.dispatcher.adapters import ToolRequest
from runfacts.schemas.errors import ConfigError
from runfacts.tools import load_registry

SERVER = Path(__file__).resolve().parents[2] / "mcp_servers" / "ledger_server.py"


def manifest(tmp: Path, extra: str = "", crash: str = "") -> Path:
    path = tmp / "ledger.mcp.toml"
    path.write_text(f"""
name = "ledger"
command = [{json.dumps(sys.executable)}, {json.dumps(str(SERVER))}]
env = {{ LEDGER_DB = {json.dumps(str(tmp / "ledger.db"))}, LEDGER_CRASH_ACCOUNT = "{crash}" }}

[tool.credit]
lookup = "find_credit"
timeout_s = 20

[tool.balance]
read_only = true
{extra}
""")
    return path


def request(cid: str, call: str, args: dict, attempt: int = 1) -> ToolRequest:
    return ToolRequest(tool_call_id=call, capability_id=cid, idempotency_key=f"key-{call}",
                       external_request_id=f"{call}-a{attempt}", attempt=attempt, lease_epoch=1, arguments=args)


def calls(tmp: Path) -> list[tuple[str, str]]:
    with sqlite3.connect(tmp / "ledger.db") as db:
        return db.execute("SELECT request_id, account FROM calls ORDER BY n").fetchall()


def test_the_manifest_governs_listed_tools_with_safe_defaults(tmp_path: Path) -> None:
    registry = load_registry(f"mcp:{manifest(tmp_path)}")  # the --tools form
    try:
        catalog = registry.catalog().capabilities
        assert sorted(catalog) == ["ledger.balance", "ledger.credit"]  # find_credit is not served
        credit, balance = catalog["ledger.credit"], catalog["ledger.balance"]
        assert (credit.risk, credit.needs_approval) == ("high", True)
        assert (balance.risk, balance.needs_approval) == ("low", False)
        schema = registry.input_schema("ledger.credit")  # type: ignore[attr-defined]
        assert schema["properties"]["amount_minor"]["exclusiveMinimum"] == 0
    finally:
        registry.connection.close()  # type: ignore[attr-defined]


def test_a_call_completes_once_with_the_key_in_meta_and_errors_are_typed(tmp_path: Path) -> None:
    registry = mcp_registry(manifest(tmp_path))
    credit = registry.adapters()["ledger.credit"]
    try:
        done = credit.execute(request("ledger.credit", "c1", {"account": "acct-1", "amount_minor": 500}))
        assert done.kind == "completed"
        value = json.loads(done.result)
        assert (value["account"], value["amount_minor"]) == ("acct-1", 500)
        again = credit.execute(request("ledger.credit", "c1", {"account": "acct-1", "amount_minor": 500}, 2))
        assert json.loads(again.result) == value  # same key: the server answers the first credit

        bad = credit.execute(request("ledger.credit", "c2", {"account": "acct-2", "amount_minor": -5}))
        assert (bad.kind, bad.error_class, bad.retryable) == ("failed", "validation", False)
        assert "amount_minor" in bad.detail and "inputSchema" in bad.detail

        closed = credit.execute(request("ledger.credit", "c3", {"account": "acct-0", "amount_minor": 5}))
        assert (closed.kind, closed.error_class, closed.code) == ("failed", "refused", "tool_error")
        assert "acct-0 is closed" in closed.detail

        assert [r for r, _ in calls(tmp_path)] == ["c1-a1", "c1-a2"]  # the bad one was never sent
        assert credit.lookup("c9-a1").kind == "not_found"
    finally:
        registry.connection.close()


def test_a_lost_answer_is_unknown_and_the_lookup_tool_finds_it(tmp_path: Path) -> None:
    registry = mcp_registry(manifest(tmp_path, crash="acct-7"))
    credit = registry.adapters()["ledger.credit"]
    try:
        lost = credit.execute(request("ledger.credit", "c7", {"account": "acct-7", "amount_minor": 70}))
        assert lost.kind == "unknown", lost
        assert calls(tmp_path) == [("c7-a1", "acct-7")]  # it did act
        fresh = mcp_registry(manifest(tmp_path)).adapters()["ledger.credit"]  # another dispatcher
        found = fresh.lookup("c7-a1")
        assert found.kind == "found_completed"
        assert json.loads(found.result)["amount_minor"] == 70
        fresh.connection.close()  # type: ignore[attr-defined]
        # the crashed session is replaced: the same adapter works again
        assert credit.execute(request("ledger.credit", "c8", {"account": "acct-8", "amount_minor": 1})).kind == \
            "completed"
    finally:
        registry.connection.close()


def test_a_bad_manifest_names_the_field_and_the_fix(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="exactly one of command"):
        parse_manifest('name = "x"\n[tool.a]\n')
    with pytest.raises(ConfigError, match="no \\[tool"):
        parse_manifest('name = "x"\nurl = "http://h/mcp"\n')
    with pytest.raises(ConfigError, match="lists no tool nope"):
        mcp_registry(manifest(tmp_path, extra="[tool.nope]\n"))


def test_serve_all_governs_every_listed_tool_with_the_default_rule(tmp_path: Path) -> None:
    path = tmp_path / "all.mcp.toml"
    path.write_text(f"""name = "ledger"
command = [{json.dumps(sys.executable)}, {json.dumps(str(SERVER))}]
env = {{ LEDGER_DB = {json.dumps(str(tmp_path / "ledger.db"))} }}
serve = "all"
[tool.balance]
read_only = true
""")
    registry = mcp_registry(path)
    try:
        catalog = registry.catalog().capabilities
        assert sorted(catalog) == ["ledger.balance", "ledger.credit", "ledger.find_credit", "ledger.note"]
        assert all((catalog[c].risk, catalog[c].needs_approval) == ("high", True)
                   for c in ("ledger.credit", "ledger.find_credit", "ledger.note"))
        assert catalog["ledger.balance"].needs_approval is False
    finally:
        registry.connection.close()


def test_a_streamable_http_server_is_governed_like_a_stdio_one(tmp_path: Path) -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    server = subprocess.Popen([sys.executable, str(SERVER), "http", str(port)], stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL, env={**os.environ, "LEDGER_DB": str(tmp_path / "ledger.db")})
    try:
        deadline = time.monotonic() + 60
        while True:
            with socket.socket() as conn:
                if conn.connect_ex(("127.0.0.1", port)) == 0:
                    break
            assert server.poll() is None and time.monotonic() < deadline, "the HTTP server did not start"
            time.sleep(0.2)
        path = tmp_path / "http.mcp.toml"
        path.write_text(f'name = "ledger"\nurl = "http://127.0.0.1:{port}/mcp"\n'
                        '[tool.credit]\nlookup = "find_credit"\n')
        registry = mcp_registry(path)
        credit = registry.adapters()["ledger.credit"]
        try:
            done = credit.execute(request("ledger.credit", "h1", {"account": "acct-3", "amount_minor": 30}))
            assert done.kind == "completed" and json.loads(done.result)["amount_minor"] == 30
            assert calls(tmp_path) == [("h1-a1", "acct-3")]
            assert credit.lookup("h1-a9").kind == "not_found"
        finally:
            registry.connection.close()
    finally:
        server.terminate()
        server.wait(30)


def test_a_server_that_cannot_start_is_a_config_error_naming_the_command(tmp_path: Path) -> None:
    path = tmp_path / "broken.mcp.toml"
    path.write_text('name = "ledger"\ncommand = ["/nonexistent/mcp-server"]\nconnect_timeout_s = 10\n'
                    '[tool.credit]\n')
    started = time.monotonic()
    with pytest.raises(ConfigError, match="cannot open a session.*nonexistent/mcp-server"):
        mcp_registry(path)
    assert time.monotonic() - started < 12  # the error, not a hang on the closed session


def test_the_tools_option_names_a_missing_manifest(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="no such file"):
        load_registry(f"mcp:{tmp_path / 'missing.mcp.toml'}")
