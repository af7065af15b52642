"""A PostgreSQL server of a row's own (scripts/postgres.sh with its own RUNFACTS_HOME and port),
so a row can restart the database without touching the shared server other tests use."""

from __future__ import annotations

from pathlib import Path

from runfacts.dev.services import run_script_logged


class OwnPostgres:
    """Start, stop and restart a private PostgreSQL on 127.0.0.1:`port`."""

    def __init__(self, home: Path, port: int = 55532) -> None:
        self.home, self.port = home, port

    @property
    def dsn(self) -> str:
        return f"postgresql://runfacts@127.0.0.1:{self.port}/runfacts"

    def _run(self, action: str, timeout_s: float = 180.0) -> None:
        env = {"RUNFACTS_HOME": str(self.home), "RUNFACTS_PG_PORT": str(self.port)}
        run_script_logged("postgres.sh", action, env, self.home / "postgres-sh.log", f"on port {self.port}",
                          timeout_s)

    def start(self) -> str:
        self.home.mkdir(parents=True, exist_ok=True)
        self._run("start")
        return self.dsn

    def stop(self) -> None:
        self._run("stop")

    def restart(self) -> None:
        """Stop (fast: every connection is closed at once) and start again."""
        self.stop()
        self._run("start")
