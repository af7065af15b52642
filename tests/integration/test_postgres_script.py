"""scripts/postgres.sh serves Debezium: a new server runs with wal_level=logical and a REPLICATION
role; `start` on a server that runs with another wal_level switches it and restarts it once, and
leaves a logical one running (a second, private server on a free port; never the shared one)."""

from __future__ import annotations

import os
import shutil
import subprocess
import uuid
from pathlib import Path

import psycopg
import pytest
from debezium_support import free_port

from runfacts.dev.services import SCRIPTS

pytestmark = pytest.mark.postgres


def _script(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(["bash", str(SCRIPTS / "postgres.sh"), *args], env=env, capture_output=True,
                            text=True, timeout=180, check=False)
    assert result.returncode == 0, result.stderr
    return result


def _started_at(dsn: str) -> str:
    with psycopg.connect(dsn) as conn:
        return str(conn.execute("SELECT pg_postmaster_start_time()").fetchone()[0])


def _pg_ctl_start(home: Path) -> None:
    pg_ctl = sorted(Path("/usr/lib/postgresql").glob("*/bin/pg_ctl"))[-1]
    command = [str(pg_ctl), "-D", str(home / "data"), "-l", str(home / "server.log"), "-w", "start"]
    if os.geteuid() == 0:
        command = ["runuser", "-u", "postgres", "--", *command]
    subprocess.run(command, check=True, capture_output=True, timeout=60)


def test_start_makes_a_logical_server_and_switches_an_older_one_once():
    port = free_port()
    home = Path("/var/tmp") / f"runfacts-pgtest-{uuid.uuid4().hex[:8]}"  # the postgres user must reach it
    env = {**os.environ, "RUNFACTS_PG_PORT": str(port), "RUNFACTS_PG_DIR": str(home)}
    dsn = f"postgresql://runfacts@127.0.0.1:{port}/runfacts"
    try:
        _script(env, "start")
        with psycopg.connect(dsn) as conn:
            assert conn.execute("SHOW wal_level").fetchone()[0] == "logical"
            assert conn.execute("SELECT rolreplication FROM pg_roles WHERE rolname = 'runfacts'").fetchone()[0]
        with psycopg.connect(f"postgresql://postgres@127.0.0.1:{port}/postgres", autocommit=True) as conn:
            conn.execute("ALTER SYSTEM SET wal_level = replica")  # a server made before this script set it
            conn.execute("ALTER ROLE runfacts NOREPLICATION")
        _script(env, "stop")
        _pg_ctl_start(home)  # started by hand, as the server that predates the script's wal_level
        with psycopg.connect(dsn) as conn:
            assert conn.execute("SHOW wal_level").fetchone()[0] == "replica"
        switched = _script(env, "start")
        assert "restarting once" in switched.stderr
        with psycopg.connect(dsn) as conn:
            assert conn.execute("SHOW wal_level").fetchone()[0] == "logical"
            assert conn.execute("SELECT rolreplication FROM pg_roles WHERE rolname = 'runfacts'").fetchone()[0]
        before = _started_at(dsn)
        again = _script(env, "start")
        assert "restarting" not in again.stderr and _started_at(dsn) == before  # a logical server is left running
    finally:
        subprocess.run(["bash", str(SCRIPTS / "postgres.sh"), "stop"], env=env, capture_output=True, timeout=60,
                       check=False)
        shutil.rmtree(home, ignore_errors=True)
