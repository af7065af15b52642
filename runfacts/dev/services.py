"""Local services for development and tests: the Kafka broker and PostgreSQL started by scripts/."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

from runfacts.schemas.errors import RunfactsError

REPO = Path(__file__).resolve().parents[2]
SCRIPTS = REPO / "scripts"


class ServiceError(RunfactsError):
    """A local service could not be started; the message says why and what to do."""


@dataclass(frozen=True)
class LocalKafka:
    """The single-node KRaft broker managed by scripts/kafka.sh."""

    port: int = field(default_factory=lambda: int(os.environ.get("KAFKA_PORT", "9092")))

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def is_up(self) -> bool:
        return port_open("127.0.0.1", self.port)

    def start(self) -> str:
        """Start the broker if it is not running (idempotent); return the bootstrap address."""
        _run_script("kafka.sh", "start")
        return self.bootstrap

    def stop(self) -> None:
        _run_script("kafka.sh", "stop")


@dataclass(frozen=True)
class LocalPostgres:
    """The PostgreSQL server managed by scripts/postgres.sh."""

    port: int = int(os.environ.get("RUNFACTS_PG_PORT", "55432"))

    @property
    def dsn(self) -> str:
        return f"postgresql://runfacts@127.0.0.1:{self.port}/runfacts"

    def start(self) -> str:
        _run_script("postgres.sh", "start")
        return self.dsn


def port_open(host: str, port: int, timeout: float = 0.5) -> bool:
    """True when something accepts TCP connections on host:port."""
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False


def docker_available() -> bool:
    """True when a Docker daemon answers (not just the client binary)."""
    if shutil.which("docker") is None:
        return False
    probe = subprocess.run(["docker", "info"], capture_output=True, timeout=10, check=False)
    return probe.returncode == 0


def _run_script(name: str, *args: str) -> None:
    script = SCRIPTS / name
    if not script.exists():
        raise ServiceError(f"{script} not found: run from a runfacts checkout")
    done = subprocess.run(["bash", str(script), *args], capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise ServiceError(f"{name} {' '.join(args)} failed (exit {done.returncode}):\n{done.stderr}")


def run_script_logged(name: str, action: str, env: dict[str, str], log: Path, what: str,
                      timeout_s: float = 180.0) -> None:
    """Run scripts/`name` `action` with `env` added to ours, its output appended to `log`; an
    InfrastructureError naming `what` and the log when it fails (a service of a test's own)."""
    from runfacts.schemas.errors import InfrastructureError

    with log.open("a") as sink:
        done = subprocess.run([str(SCRIPTS / name), action], env={**os.environ, **env}, stdout=sink,
                              stderr=subprocess.STDOUT, timeout=timeout_s, check=False)
    if done.returncode != 0:
        raise InfrastructureError(f"{name} {action} {what} failed; see {log}", retryable=False)
