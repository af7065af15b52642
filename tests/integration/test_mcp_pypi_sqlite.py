"""docs/mcp.md "A server from PyPI": examples/mcp_sqlite/notes.mcp.toml puts the MCP project's
mcp-server-sqlite (from PyPI, in its own venv: scripts/mcp-servers.sh) behind runfacts, unchanged.
An MCP client (the official SDK) calls it through `runfacts mcp serve` on the real broker: a write
waits for a person and runs once, a retry with the same key gets the same answer, a rejected
write never runs, a read needs nobody."""

from __future__ import annotations

import asyncio
import os
import shutil
import sqlite3
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from client_support import approval_of
from mcp import Client, MCPError
from mcp_support import McpStack, run_id_of, texts
from tools_support import REPO, ToolStack

from runfacts.demo.stack import DemoOptions
from runfacts.mcp import META_IDEMPOTENCY_KEY
from runfacts.settings import KafkaSettings

pytestmark = pytest.mark.integration
EXAMPLE = REPO / "examples" / "mcp_sqlite" / "notes.mcp.toml"
AGENT = "mcp-agent"


class SqliteStack(McpStack):
    """The example's manifest, served by the real decider and dispatcher."""

    def __init__(self, options: DemoOptions, manifest: Path) -> None:
        self.manifest = manifest
        ToolStack.__init__(self, options, tools=f"mcp:{manifest}", manifest_file=False)


@pytest.fixture(scope="module")
def stack(kafka_bootstrap: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[SqliteStack]:
    bin_dir = subprocess.run([str(REPO / "scripts" / "mcp-servers.sh"), "path"], capture_output=True, text=True,
                             check=True).stdout.strip()
    assert (Path(bin_dir) / "mcp-server-sqlite").exists(), \
        "mcp-server-sqlite is not installed: run scripts/mcp-servers.sh install (scripts/setup.sh --all does)"
    workdir = tmp_path_factory.mktemp("mcp-sqlite")
    shutil.copy(EXAMPLE, workdir / EXAMPLE.name)  # notes.db is created beside it
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
        options = DemoOptions(prefix=f"mcpsql-{uuid.uuid4().hex[:10]}", workdir=workdir / "stack", partitions=2,
                              kafka=KafkaSettings(bootstrap_servers=kafka_bootstrap))
        stack = SqliteStack(options, workdir / EXAMPLE.name)
        try:
            stack.start()
            yield stack
        finally:
            stack.stop()


def _rows(stack: SqliteStack) -> list[tuple[Any, ...]]:
    with sqlite3.connect(stack.manifest.parent / "notes.db") as db:
        return db.execute("SELECT id, body FROM notes ORDER BY id").fetchall()


async def _decided(stack: SqliteStack, client: Client, tool: str, sql: str, key: str, decision: str) -> Any:
    """Call `tool` through runfacts and have a person decide its approval meanwhile."""
    call = asyncio.ensure_future(client.call_tool(tool, {"query": sql}, meta={META_IDEMPOTENCY_KEY: key}))
    rf = stack.client()
    approval = await asyncio.to_thread(approval_of, rf, run_id_of(AGENT, key), 120)
    assert approval.display is not None and sql in str(approval.display.fields[0].value), \
        "the approver sees the SQL that will run"
    await asyncio.to_thread(rf.decide, approval, decision, approver="alice", timeout=90)
    return await call


def test_a_pypi_mcp_server_is_governed_without_a_line_of_its_code(stack: SqliteStack) -> None:
    async def scenario() -> None:
        async with Client(stack.serve_params(agent=AGENT)) as client:
            names = sorted(tool.name for tool in (await client.list_tools()).tools)
            assert names == ["notes.create_table", "notes.list_tables", "notes.read_query", "notes.write_query"]

            created = await _decided(stack, client, "notes.create_table",
                                     "CREATE TABLE notes (id INTEGER PRIMARY KEY, body TEXT)",
                                     f"k-{uuid.uuid4().hex}", "approve")
            assert not created.is_error and "created" in texts(created)

            key = f"k-{uuid.uuid4().hex}"
            insert = "INSERT INTO notes (body) VALUES ('refund approved for order-5001')"
            written = await _decided(stack, client, "notes.write_query", insert, key, "approve")
            again = await client.call_tool("notes.write_query", {"query": insert}, meta={META_IDEMPOTENCY_KEY: key})
            assert texts(written) == texts(again) and "'affected_rows': 1" in texts(written)

            with pytest.raises(MCPError) as rejected:
                await _decided(stack, client, "notes.write_query", "DELETE FROM notes",
                               f"k-{uuid.uuid4().hex}", "reject")
            assert rejected.value.code == -32001

            read = await client.call_tool("notes.read_query", {"query": "SELECT body FROM notes"})
            assert "order-5001" in texts(read)

    asyncio.run(scenario())
    assert _rows(stack) == [(1, "refund approved for order-5001")]  # one insert, the delete never ran
