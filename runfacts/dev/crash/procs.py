"""Real worker processes for the crash matrix: start (armed or not), let die, kill -9, restart.

Each `Worker` is one logical instance (stable instance id and state directory, so a restart
is the same instance coming back); every start gets its own log file. `Provider` is the
payment simulator as a process, with its ledger file as ground truth.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from runfacts.crashpoints import arm
from runfacts.schemas.errors import InfrastructureError

STRIPPED = ("RUNFACTS_CRASH", "RUNFACTS_APPROVAL_KEYS", "RUNFACTS_SOURCE_KEYS", "RUNFACTS_GUARANTEE",
            "RUNFACTS_STATE_DIR", "RUNFACTS_INSTANCE_ID", "RUNFACTS_CONSUMER", "RUNFACTS_KAFKA_BOOTSTRAP_SERVERS")
API_KEY = "sk-crash-not-a-secret"


def child_env(**extra: str) -> dict[str, str]:
    """The environment of a child: ours minus crash arms, keyrings and engine identity, plus `extra`."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(STRIPPED)}
    env.update({"PYTHONUNBUFFERED": "1", "RUNFACTS_PAYMENT_API_KEY": API_KEY})
    env.update(extra)
    return env


@dataclass
class Worker:
    """One engine instance of an application, run as `python -m runfacts.processors.engine.worker`."""

    name: str
    app: str
    params: dict[str, str]
    bootstrap: str
    workdir: Path
    guarantee: str = "exactly_once"
    env: dict[str, str] = field(default_factory=dict)
    static: bool = True
    starts: int = 0
    proc: subprocess.Popen[bytes] | None = None

    @property
    def state_dir(self) -> Path:
        return self.workdir / f"state-{self.name}"

    @property
    def marker(self) -> Path:
        return self.workdir / f"{self.name}.crashed"

    def log(self, start: int | None = None) -> Path:
        return self.workdir / f"{self.name}-{start or self.starts}.log"

    def start(self, crash_at: str = "", after: int = 1, hold_until: str = "", armed_from: str = "",
              **env: str) -> Worker:
        """Start an incarnation; `crash_at` arms a crash point (it dies there by SIGKILL, or with
        `hold_until` waits there until that file exists; the marker says when it got there;
        with `armed_from` only hits after that file exists count)."""
        self.starts += 1
        args = [sys.executable, "-m", "runfacts.processors.engine.worker", "--app", self.app]
        for key, value in self.params.items():
            args += ["--param", f"{key}={value}"]
        conf = {**self.env, **env}
        if self.static:
            consumer = json.loads(conf.get("RUNFACTS_CONSUMER", "{}"))
            conf["RUNFACTS_CONSUMER"] = json.dumps({"group.instance.id": f"{self.app_prefix}-{self.name}",
                                                    **consumer})
        if crash_at:
            conf.update(arm(crash_at, after, hold_until, armed_from), RUNFACTS_CRASH_MARKER=str(self.marker))
        full = child_env(RUNFACTS_KAFKA_BOOTSTRAP_SERVERS=self.bootstrap, RUNFACTS_STATE_DIR=str(self.state_dir),
                         RUNFACTS_INSTANCE_ID=self.name, RUNFACTS_GUARANTEE=self.guarantee, **conf)
        with self.log().open("wb") as sink:
            self.proc = subprocess.Popen(args, env=full, stdout=subprocess.DEVNULL, stderr=sink)
        return self

    @property
    def app_prefix(self) -> str:
        return self.params.get("prefix", "runfacts")

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def wait(self, timeout_s: float) -> int | None:
        """The exit code once the process ends within `timeout_s` (None: still running)."""
        if self.proc is None:
            return None
        try:
            return self.proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            return None

    def wait_killed(self, timeout_s: float = 90.0) -> str:
        """Wait for the armed incarnation to die by SIGKILL at its point; returns the marker line."""
        code = self.wait(timeout_s)
        if code != -signal.SIGKILL:
            self.kill()
            raise InfrastructureError(f"{self.name} did not die at its crash point (exit {code}); "
                                      f"see {self.log()}", retryable=False)
        return self.marker.read_text().strip().splitlines()[-1] if self.marker.exists() else ""

    def kill(self) -> None:
        """kill -9 from outside (no-op when it is not running)."""
        if self.alive():
            assert self.proc is not None
            self.proc.kill()
            self.proc.wait(10)

    def stop(self, timeout_s: float = 30.0) -> int | None:
        """SIGTERM: finish the batch, commit, leave; SIGKILL if it does not stop in time."""
        if not self.alive():
            return None if self.proc is None else self.proc.returncode
        assert self.proc is not None
        self.proc.send_signal(signal.SIGTERM)
        code = self.wait(timeout_s)
        if code is None:
            self.kill()
        return code

    def pause_in_transaction(self, release: Path, pause_s: float, timeout_s: float = 60.0) -> float:
        """SIGSTOP an incarnation while it holds a transaction open, for `pause_s`, then SIGCONT.

        The incarnation was started with `crash_at="engine.in_transaction", hold_until=release`:
        the marker says it processed a batch and holds at the point, its transaction open (not
        mid-restore, not between transactions). It is stopped there, the hold is released (it goes
        on once continued), and it stays stopped `pause_s`. Returns how long it was stopped."""
        deadline = time.monotonic() + timeout_s
        while not self.marker.exists():
            if not self.alive() or time.monotonic() > deadline:
                raise InfrastructureError(f"{self.name} never held a transaction open at engine.in_transaction "
                                          f"(alive: {self.alive()}); see {self.log()}", retryable=False)
            time.sleep(0.05)
        assert self.proc is not None
        self.proc.send_signal(signal.SIGSTOP)
        stopped = time.monotonic()
        release.touch()
        time.sleep(pause_s)
        self.proc.send_signal(signal.SIGCONT)
        return time.monotonic() - stopped

    def recovered(self, text: str) -> bool:
        """Whether the current incarnation's log mentions `text` (e.g. 'restored')."""
        return text in self.log().read_text(errors="replace")


class Provider:
    """The payment simulator as a process on a free loopback port, with a JSON-lines ledger."""

    def __init__(self, workdir: Path) -> None:
        self.ledger = workdir / "ledger.jsonl"
        self._log = workdir / "payment-sim.log"
        self.proc: subprocess.Popen[bytes] | None = None
        self.url = ""

    def start(self) -> str:
        args = [sys.executable, "-m", "runfacts.dev.provider.server", "--port", "0", "--ledger", str(self.ledger)]
        with self._log.open("ab") as sink:
            self.proc = subprocess.Popen(args, env=child_env(), stdout=subprocess.PIPE, stderr=sink)
        line = self.proc.stdout.readline().decode() if self.proc.stdout else ""
        if "listening on " not in line:
            self.stop()
            raise InfrastructureError(f"payment simulator did not start; see {self._log}", retryable=False)
        self.url = line.rsplit(" ", 1)[-1].strip()
        return self.url

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)


def wait_until(condition: object, timeout_s: float, what: str, interval_s: float = 0.5) -> None:
    """Poll `condition()` until true; InfrastructureError naming `what` after `timeout_s`."""
    deadline = time.monotonic() + timeout_s
    while not condition():  # type: ignore[operator]
        if time.monotonic() > deadline:
            raise InfrastructureError(f"timed out after {timeout_s:.0f}s waiting for {what}", retryable=True)
        time.sleep(interval_s)
