"""A governed-MCP stack on the real broker: the real decider and dispatcher serving a downstream
MCP server's tools (`--tools mcp:<manifest.toml>`; the server is tests/mcp_servers/ledger_server.py,
the official SDK's MCPServer with a counting ledger), and `runfacts mcp serve` started by the
official SDK's Client over stdio as an MCP client would start it."""

from __future__ import annotations

import hashlib
import json
import os
import socket
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from mcp import StdioServerParameters
from tools_support import REPO, ToolStack

from runfacts.client import ClientSettings, Runfacts, UiSettings
from runfacts.client.run import sha256
from runfacts.demo.stack import DemoOptions

SERVER = REPO / "tests" / "mcp_servers" / "ledger_server.py"
CRASH_ACCOUNT = "acct-900"  # the downstream server dies right after crediting it (once)
SLOW_ACCOUNT = "acct-901"  # the downstream server takes 6 s before crediting it


def write_manifest(directory: Path) -> Path:
    path = directory / "ledger.mcp.toml"
    path.write_text(f"""# the operator's manifest of the test's downstream MCP server
name = "ledger"
command = [{json.dumps(sys.executable)}, {json.dumps(str(SERVER))}]
env = {{ LEDGER_DB = {json.dumps(str(directory / "ledger.db"))}, LEDGER_CRASH_ACCOUNT = "{CRASH_ACCOUNT}", \
LEDGER_SLOW_ACCOUNT = "{SLOW_ACCOUNT}" }}

[tool.credit]
lookup = "find_credit"
approval_ttl_ms = 60000
timeout_s = 20

[tool.note]
approval_ttl_ms = 4000

[tool.balance]
read_only = true
""")
    return path


class McpStack(ToolStack):
    """Decider and dispatcher with `--tools mcp:<manifest>`; `serve_params` starts the MCP server."""

    def __init__(self, options: DemoOptions) -> None:
        options.workdir.mkdir(parents=True, exist_ok=True)  # type: ignore[union-attr]
        self.manifest = write_manifest(options.workdir)  # type: ignore[arg-type]
        super().__init__(options, tools=f"mcp:{self.manifest}", manifest_file=False)

    def serve_params(self, agent: str = "mcp-agent", wait_s: float = 120) -> StdioServerParameters:
        """`runfacts mcp serve` over stdio on this stack, as an MCP client's config starts it."""
        env = self.serve_env()
        return StdioServerParameters(command=sys.executable, args=[
            "-m", "runfacts.cli", "mcp", "serve", "--tools", self.tools, "--agent", agent, "--wait", str(wait_s)],
            env=env, cwd=str(REPO))

    def serve_env(self) -> dict[str, str]:
        return {"PATH": os.environ.get("PATH", ""), "PYTHONPATH": str(REPO),
                "RUNFACTS_KAFKA_BOOTSTRAP_SERVERS": self.options.kafka.bootstrap_servers,
                "RUNFACTS_KAFKA_TOPIC_PREFIX": self.names.prefix, "RUNFACTS_ARGS_STORE": str(self.dir / "harness.db")}

    @contextmanager
    def serve_http(self, keys: dict[str, str]) -> Iterator[str]:
        """`runfacts mcp serve --transport http` with API keys {subject: key}; yields its URL."""
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            port = probe.getsockname()[1]
        keyfile = self.dir / f"keys-{port}.toml"
        keyfile.write_text("[keys]\n" + "".join(f'{subject} = "{hashlib.sha256(key.encode()).hexdigest()}"\n'
                                                 for subject, key in keys.items()))
        log = (self.dir / f"serve-http-{port}.log").open("wb")
        proc = subprocess.Popen([sys.executable, "-m", "runfacts.cli", "mcp", "serve", "--tools", self.tools,
                                 "--transport", "http", "--port", str(port), "--api-keys", str(keyfile),
                                 "--wait", "120"], env=self.serve_env(), cwd=REPO, stdout=log, stderr=log)
        try:
            deadline = time.monotonic() + 120
            while True:
                with socket.socket() as conn:
                    if conn.connect_ex(("127.0.0.1", port)) == 0:
                        break
                assert proc.poll() is None and time.monotonic() < deadline, \
                    (self.dir / f"serve-http-{port}.log").read_text()
                time.sleep(0.3)
            yield f"http://127.0.0.1:{port}/mcp"
        finally:
            proc.terminate()
            proc.wait(30)
            log.close()

    def client(self) -> Runfacts:
        """An approving UI's client on this stack (approvals signed with the decider's keyring)."""
        settings = ClientSettings(ui=UiSettings(signing_env=self.options.signing_env), component="mcp-test")
        return Runfacts.connect(kafka=self.options.kafka, prefix=self.names.prefix,
                                args_store=self.dir / "harness.db", settings=settings)

    def executions(self, account: str) -> list[tuple[str, str]]:
        """Every time the downstream tool ran for `account`: (external request id, idempotency key)."""
        with sqlite3.connect(self.dir / "ledger.db") as db:
            if not db.execute("SELECT 1 FROM sqlite_master WHERE name = 'calls'").fetchall():
                return []  # the server never ran a tool yet
            return db.execute("SELECT request_id, key FROM calls WHERE account = ? ORDER BY n", (account,)).fetchall()


def run_id_of(agent: str, key: str) -> str:
    """The run `runfacts mcp serve` opens for (actor, idempotency key) (runfacts.mcp.server)."""
    return f"mcp-{sha256(f'{agent}|{key}')[:32]}"


def texts(result: Any) -> str:
    return " ".join(getattr(block, "text", "") for block in result.content)
