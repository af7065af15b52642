"""Debezium test helpers: a real Kafka Connect worker (scripts/kafka-connect.sh, its own state
directory and REST port, the repo's jar caches), connectors applied over its REST API, and the
clean-up of what a connector leaves in PostgreSQL (replication slot, publication)."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg
import pytest
from outbox_support import drop_outbox

from runfacts.connectors.outbox.debezium import DebeziumOutbox

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "scripts" / "kafka-connect.sh"
CACHE = Path(os.environ.get("RUNFACTS_HOME", REPO / ".runfacts")) / "kafka-connect"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class ConnectWorker:
    """One standalone Connect worker started by the project's script."""

    home: Path
    bootstrap: str
    port: int
    offset_flush_ms: int = 1000

    @property
    def rest(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def pid_file(self) -> Path:
        return self.home / "kafka-connect" / "connect.pid"

    @property
    def log(self) -> Path:
        return self.home / "kafka-connect" / "connect.log"

    def script(self, *args: str, timeout: float = 400) -> subprocess.CompletedProcess[str]:
        env = {**os.environ, "RUNFACTS_HOME": str(self.home), "KAFKA_CONNECT_PORT": str(self.port),
               "KAFKA_BOOTSTRAP": self.bootstrap, "KAFKA_CONNECT_LIBS": str(CACHE / "libs"),
               "KAFKA_CONNECT_PLUGINS": str(CACHE / "plugins"),
               "KAFKA_CONNECT_OFFSET_FLUSH_MS": str(self.offset_flush_ms)}
        result = subprocess.run([str(SCRIPT), *args], env=env, capture_output=True, text=True, timeout=timeout,
                                check=False)
        assert result.returncode == 0, f"kafka-connect.sh {' '.join(args)}: {result.stderr}"
        return result

    def start(self) -> ConnectWorker:
        self.script("start")
        return self

    def stop(self) -> None:
        self.script("stop", timeout=60)

    def kill9(self) -> int:
        """kill -9 the worker JVM; its pid."""
        pid = int(self.pid_file.read_text())
        os.kill(pid, signal.SIGKILL)
        for _ in range(100):
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                return pid
            time.sleep(0.1)
        raise AssertionError(f"connect worker {pid} survived kill -9")

    def call(self, method: str, path: str, body: Any = None) -> tuple[int, Any]:
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(self.rest + path, data=data, method=method,
                                         headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(request, timeout=30) as response:
                text = response.read()
                return response.status, json.loads(text) if text else None
        except urllib.error.HTTPError as exc:
            return exc.code, exc.read().decode()

    def apply(self, connector: DebeziumOutbox, timeout: float = 120) -> None:
        """PUT the connector's config and wait until its task runs (a failed task fails the test)."""
        code, body = self.call("PUT", f"/connectors/{connector.connector_name}/config", connector.config())
        assert code in (200, 201), body
        self.wait_running(connector, timeout)

    def apply_as_operator(self, connector: DebeziumOutbox, workdir: Path, timeout: float = 120) -> None:
        """What the docs say: `runfacts outbox debezium-config ... > FILE`, `kafka-connect.sh apply FILE`."""
        printed = subprocess.run([sys.executable, "-m", "runfacts.cli", "outbox", "debezium-config",
                                  "--dsn", connector.dsn, "--prefix", connector.prefix, "--table", connector.table],
                                 capture_output=True, text=True, timeout=60, check=True)
        file = workdir / f"{connector.connector_name}.json"
        file.write_text(printed.stdout)
        self.script("apply", str(file))
        self.wait_running(connector, timeout)

    def wait_running(self, connector: DebeziumOutbox, timeout: float = 120) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            code, status = self.call("GET", f"/connectors/{connector.connector_name}/status")
            tasks = status.get("tasks", []) if code == 200 else []
            if any(t["state"] == "FAILED" for t in tasks):
                raise AssertionError(f"connector task failed: {tasks[0].get('trace', '')[:2000]}")
            if tasks and all(t["state"] == "RUNNING" for t in tasks):
                return
            time.sleep(0.3)
        raise AssertionError(f"connector {connector.connector_name} not running after {timeout}s: {status}")

    def delete(self, name: str) -> None:
        self.call("DELETE", f"/connectors/{name}")


def require_logical(dsn: str) -> None:
    """Fail (never skip) with the fix when PostgreSQL cannot serve Debezium."""
    with psycopg.connect(dsn) as conn:
        level = conn.execute("SHOW wal_level").fetchone()[0]
        replication = conn.execute("SELECT rolreplication FROM pg_roles WHERE rolname = current_user").fetchone()[0]
    if level != "logical" or not replication:
        pytest.fail(f"PostgreSQL at {dsn} has wal_level={level}, REPLICATION={replication}; Debezium needs "
                    "wal_level=logical and a REPLICATION role: `scripts/postgres.sh start` sets both")


def drop_capture(dsn: str, connector: DebeziumOutbox, timeout: float = 60) -> None:
    """Drop the connector's replication slot (once inactive) and publication, then the outbox."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            row = conn.execute("SELECT active FROM pg_replication_slots WHERE slot_name = %s",
                               (connector.slot,)).fetchone()
            if row is None:
                break
            if not row[0]:
                conn.execute("SELECT pg_drop_replication_slot(%s)", (connector.slot,))
                break
            time.sleep(0.3)
        conn.execute(f"DROP PUBLICATION IF EXISTS {connector.slot}_pub")
    drop_outbox(connector.dsn, connector.table)


def connect_worker(tmp: Path, bootstrap: str, **kw: Any) -> Iterator[ConnectWorker]:
    worker = ConnectWorker(tmp, bootstrap, free_port(), **kw).start()
    try:
        yield worker
    finally:
        worker.stop()


@pytest.fixture(scope="session")
def kafka_connect(tmp_path_factory: pytest.TempPathFactory, kafka_bootstrap: str) -> Iterator[ConnectWorker]:
    """A Connect worker with the Debezium plugin for the session (about 20-60 s to start)."""
    yield from connect_worker(tmp_path_factory.mktemp("connect"), kafka_bootstrap)
