"""`runfacts dev up`: the whole local stack as one supervised process tree (shell).

Steps of `DevStack.run()`:
1. The broker: RUNFACTS_KAFKA_BOOTSTRAP_SERVERS (or 127.0.0.1:$KAFKA_PORT) when it answers,
   else the local broker of scripts/kafka.sh (`LocalKafka`), started and reused.
2. The topics of the prefix and the workers' store changelogs (`apply_topics`, idempotent).
3. The workers as `runfacts worker ...` subprocesses: the decider (the manifest of `--tools`
   when given), the dispatcher serving the registry, the projector, the memory projector, and
   the console (`runfacts dashboard serve`), and with `--agent` your `@rf.agent` service
   (`runfacts worker agent module:attribute`); without `--tools` the packaged refund tool is
   served against the payment simulator. Every worker runs with static membership
   (`group.instance.id` = `<prefix>-dev-<worker>`, a stable RUNFACTS_INSTANCE_ID), so a
   restarted worker takes its partitions back at once instead of waiting for a rebalance.
4. Ready: every worker's log shows its partitions assigned and the console answers; the
   console URL, the environment to export (also written to `<workdir>/env.sh`) and the log
   directory are printed.
5. Supervise: a worker that exits is restarted after a backoff (1 s, doubling to 30 s; back
   to 1 s once it ran a minute), and it says so; a change of the registry's module file
   (mtime, polled each second) restarts the decider, the dispatcher and the agent ("reloading");
   a change of the agent's module restarts the agent.
6. SIGINT/SIGTERM: every child gets SIGTERM (SIGKILL after a grace period), in reverse start
   order; exit 0. Children run in sessions of their own (the terminal's Ctrl-C reaches only
   the supervisor, which stops them in order) and die with the supervisor on Linux
   (PR_SET_PDEATHSIG), so a killed supervisor leaves no worker behind.

Secrets (approval keyring, console session secret, audit digest key, the console's dev user
password and CLI token) are made once per work directory (`<workdir>/secrets.json`, mode 600) and reused, so
the exported environment stays valid across `dev up` restarts.
"""

from __future__ import annotations

import contextlib
import ctypes
import importlib.util
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from runfacts.dev import require_clone
from runfacts.dev.services import LocalKafka, port_open
from runfacts.processors.policy.keyring import new_secret
from runfacts.schemas.errors import ConfigError, RunfactsError
from runfacts.security.identity import hash_secret
from runfacts.settings import KafkaSettings
from runfacts.topics import TopicNames, apply_topics, changelog_spec, runfacts_topics

PAYMENT_API_KEY = "sk-dev-not-a-secret"
BACKOFF_FIRST_S = 1.0
BACKOFF_MAX_S = 30.0
STABLE_AFTER_S = 60.0
STOP_GRACE_S = 15.0
DEV_USER = "dev"
DEV_ROLES = ("support_agent", "supervisor", "operator", "auditor", "memory_reviewer")  # every approver role
_PR_SET_PDEATHSIG = 1
STRIPPED = ("RUNFACTS_CRASH", "RUNFACTS_APPROVAL_KEYS", "RUNFACTS_AUDIT_PII_KEY", "RUNFACTS_SOURCE_KEYS",
            "RUNFACTS_PII_KEYS", "RUNFACTS_CONSUMER", "RUNFACTS_INSTANCE_ID", "RUNFACTS_STATE_DIR")


class DevError(RunfactsError):
    """`dev up` could not start a part of the stack; the message names it and its log."""


@dataclass
class DevOptions:
    """What `runfacts dev up` runs."""

    tools: str = ""
    """The registry the dispatcher serves, `module:attribute` (empty: the packaged refund tool
    against the payment simulator)."""
    agent: str = ""
    """Your `@rf.agent` service, `module:attribute`, run as one more supervised worker (empty: none)."""
    capabilities: str = ""
    """Without `tools`: the manifest (TOML) the decider reads and the dispatcher serves (empty: the
    packaged one); `runfacts dev up` gives the demo's (the refund, and the refund with a 5 s
    approval window that the guide's expiry story uses)."""
    prefix: str = "runfacts"
    partitions: int = 3
    workdir: Path | None = None
    """Logs, state, the argument store, secrets (default `./.runfacts/dev/<prefix>`)."""
    console_port: int = 8080
    """The console's port (0: a free one)."""
    kafka: KafkaSettings = field(default_factory=KafkaSettings)
    ready_timeout_s: float = 180.0
    reload: bool = True

    def __post_init__(self) -> None:
        self.workdir = (self.workdir or Path.cwd() / ".runfacts" / "dev" / self.prefix).resolve()
        if self.partitions < 1:
            raise ConfigError("--partitions", str(self.partitions), "expected at least 1 partition")


@dataclass
class Worker:
    """One supervised child: how to start it and its current process."""

    name: str
    args: list[str]
    env: dict[str, str]
    proc: subprocess.Popen[bytes] | None = None
    started_at: float = 0.0
    starts: int = 0
    backoff_s: float = BACKOFF_FIRST_S
    restart_at: float | None = None


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def module_file(tools: str, cwd: Path, setting: str = "--tools") -> Path | None:
    """The source file of the registry's (or agent's) module (what a reload watches), None if not a file."""
    module = tools.partition(":")[0]
    added = str(cwd) not in sys.path
    if added:
        sys.path.insert(0, str(cwd))
    try:
        spec = importlib.util.find_spec(module)
    except (ImportError, ValueError) as exc:
        raise ConfigError(setting, tools, f"module {module!r} cannot be found from {cwd} ({exc}); run "
                                            "`runfacts dev up` from the directory your module imports from") from None
    finally:
        if added:
            sys.path.remove(str(cwd))
    if spec is None:
        raise ConfigError(setting, tools, f"no module {module!r} importable from {cwd}; run `runfacts dev up` "
                                            "from the directory your module imports from, or set PYTHONPATH")
    return Path(spec.origin) if spec.origin and os.path.isfile(spec.origin) else None


def _die_with_parent() -> None:  # pragma: no cover - runs in the child between fork and exec
    os.setsid()
    if sys.platform.startswith("linux"):
        with contextlib.suppress(OSError):
            ctypes.CDLL("libc.so.6", use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)


class DevStack:
    """The supervisor of `runfacts dev up` (see the module docstring)."""

    def __init__(self, options: DevOptions, say: Callable[[str], None] = print) -> None:
        self.options = options
        self.say = say
        self.names = TopicNames(options.prefix)
        self.dir: Path = options.workdir  # type: ignore[assignment]
        self.logs = self.dir / "logs"
        self.workers: dict[str, Worker] = {}
        self.stopping = threading.Event()
        self.console_port = options.console_port
        self.bootstrap = ""
        self.watched: Path | None = None
        self._mtime = 0.0
        self.agent_watched: Path | None = None
        self._agent_mtime = 0.0
        self.provider: subprocess.Popen[bytes] | None = None

    # --- setup -------------------------------------------------------------------------------

    def broker(self) -> str:
        """The broker to use: the configured one when it answers, else the local one (started)."""
        configured = self.options.kafka.bootstrap_servers
        host, _, port = configured.split(",")[0].rpartition(":")
        if host and port.isdigit() and port_open(host, int(port)):
            self.say(f"broker: reusing {configured}")
            return configured
        local = LocalKafka()
        if local.is_up():
            self.say(f"broker: reusing the local broker at {local.bootstrap}")
            return local.bootstrap
        self.say(f"broker: starting the local broker on {local.bootstrap} (scripts/kafka.sh) ...")
        return local.start()

    def secrets(self) -> dict[str, str]:
        path = self.dir / "secrets.json"
        kept = dict(json.loads(path.read_text())) if path.exists() else {}
        made = {"approval_keys": json.dumps({"current": "dev-1", "keys": {"dev-1": new_secret()}}),
                "session_secret": new_secret(), "audit_pii_key": new_secret(), "password": new_secret()[:16],
                "cli_token": new_secret(), **kept}  # a work directory of an older dev up gets what it lacks
        if made != kept:
            path.touch(mode=0o600)
            path.write_text(json.dumps(made, indent=2))
        return made

    def changelogs(self) -> list[str]:
        """The store changelog topics of the four workers (named as the engine names them)."""
        from runfacts.processors.decider.app import APP_NAME as DECIDER_APP
        from runfacts.processors.dispatcher.app import app_name as dispatcher_app_name
        from runfacts.projections.projector.app import app_name as projector_app_name
        from runfacts.projections.projector.memory import app_name as memory_app_name

        prefix = self.names.prefix
        apps = {DECIDER_APP if prefix == "runfacts" else f"{prefix}-run-decider": ("orphans", "__timers"),
                dispatcher_app_name(prefix): ("runs", "progress", "__timers"),
                projector_app_name(prefix): ("heads", "trajectories", "__timers"),
                memory_app_name(prefix): ("memories", "__timers")}
        return [f"{app}-{store}-changelog" for app, stores in apps.items() for store in stores]

    def env(self) -> dict[str, str]:
        """What an agent (and `runfacts` commands: `runfacts approve` acts as the dev user) need to
        reach this stack: export it."""
        secrets = self.secrets()
        tools = {"RUNFACTS_TOOLS": self.options.tools} if self.options.tools else {}  # typed results (client)
        return {"RUNFACTS_KAFKA_BOOTSTRAP_SERVERS": self.bootstrap, "RUNFACTS_KAFKA_TOPIC_PREFIX": self.names.prefix,
                "RUNFACTS_ARGS_STORE": str(self.dir / "args.db"), "RUNFACTS_APPROVAL_KEYS": secrets["approval_keys"],
                **tools, "RUNFACTS_USERS_FILE": str(self.dir / "users.toml"), "RUNFACTS_USER": DEV_USER,
                "RUNFACTS_TOKEN": secrets["cli_token"]}

    def _base_env(self, secrets: dict[str, str]) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith(STRIPPED)}
        path = [str(Path.cwd())] + ([os.environ["PYTHONPATH"]] if os.environ.get("PYTHONPATH") else [])
        env.update({"RUNFACTS_KAFKA_BOOTSTRAP_SERVERS": self.bootstrap,
                    "RUNFACTS_KAFKA_TOPIC_PREFIX": self.names.prefix,
                    "RUNFACTS_STATE_DIR": str(self.dir / "state"), "RUNFACTS_COMMIT_INTERVAL_MS": "50",
                    "RUNFACTS_POLL_TIMEOUT_MS": "50", "RUNFACTS_DASHBOARD_SESSION_SECRET": secrets["session_secret"],
                    "RUNFACTS_USERS_FILE": str(self.dir / "users.toml"), "PYTHONPATH": os.pathsep.join(path),
                    "PYTHONUNBUFFERED": "1"})
        if self.options.kafka.config:
            env["RUNFACTS_KAFKA_CONFIG"] = json.dumps(self.options.kafka.config)
        return env

    def _packaged_capabilities(self) -> list[str]:
        """Without --tools: the demo's manifest (the refund, and the same refund with a 5 s approval
        window for the guide's expiry story), read by the decider and served by the dispatcher."""
        if not self.options.capabilities:
            return []
        path = self.dir / "capabilities.toml"
        path.write_text(self.options.capabilities)
        return ["--capabilities", str(path)]

    def plan(self, provider_url: str = "") -> dict[str, Worker]:
        """The workers, in start order (the decider first: it publishes the versions)."""
        secrets = self.secrets()
        base = self._base_env(secrets)
        cli = [sys.executable, "-m", "runfacts.cli"]
        prefix = ["--prefix", self.names.prefix]
        tools = ["--tools", self.options.tools] if self.options.tools else self._packaged_capabilities()

        def worker(name: str, args: list[str], **extra: str) -> Worker:
            static = {"group.instance.id": f"{self.names.prefix}-dev-{name}"}  # a restart replaces it at once
            return Worker(name, args, {**base, "RUNFACTS_INSTANCE_ID": f"dev-{name}",
                                       "RUNFACTS_CONSUMER": json.dumps(static), **extra})

        dispatch = ["--args-store", str(self.dir / "args.db"), *tools]
        if provider_url:
            dispatch += ["--provider-url", provider_url]
        agent = [Worker("agent", [*cli, "worker", "agent", self.options.agent, *prefix],
                        {**base, **self.env()})] if self.options.agent else []  # its own group: no static id
        return {w.name: w for w in (
            worker("decider", [*cli, "worker", "decider", *prefix, *tools],
                   RUNFACTS_APPROVAL_KEYS=secrets["approval_keys"]),
            worker("dispatcher", [*cli, "worker", "dispatcher", *prefix, *dispatch],
                   RUNFACTS_PAYMENT_API_KEY=PAYMENT_API_KEY),
            worker("projector", [*cli, "worker", "projector", *prefix],
                   RUNFACTS_AUDIT_PII_KEY=secrets["audit_pii_key"]),
            worker("memory", [*cli, "worker", "memory", *prefix]),
            Worker("console", [*cli, "dashboard", "serve", "--host", "127.0.0.1", "--port", str(self.console_port)],
                   {**base, "RUNFACTS_APPROVAL_KEYS": secrets["approval_keys"]}),
            *agent,
        )}

    def setup(self) -> None:
        self.dir.mkdir(parents=True, exist_ok=True)
        self.logs.mkdir(exist_ok=True)
        if self.options.tools:
            self.watched = module_file(self.options.tools, Path.cwd())
            self._mtime = self._stat()
        if self.options.agent:
            self.agent_watched = module_file(self.options.agent, Path.cwd(), "--agent")
            self._agent_mtime = self._stat(self.agent_watched)
        self.bootstrap = self.broker()
        kafka = self.options.kafka.model_copy(update={"bootstrap_servers": self.bootstrap})
        p = self.options.partitions
        specs = runfacts_topics(self.names, p) + [changelog_spec(name, p) for name in self.changelogs()]
        report = apply_topics(kafka, specs)
        self.say(f"topics: {len(report.created)} created, {len(specs) - len(report.created)} reused "
                 f"(prefix {self.names.prefix}, {p} partitions)")
        self.write_users()
        if self.console_port == 0 or port_open("127.0.0.1", self.console_port):
            self.console_port = free_port()
        provider_url = "" if self.options.tools else self._start_provider()
        self.workers = self.plan(provider_url)

    def write_users(self) -> None:
        """The console's and the CLI's one user, `dev`, holding every approver role: its password
        (printed) for the console, its token (exported as RUNFACTS_TOKEN) for `runfacts approve`."""
        secrets = self.secrets()
        roles = ", ".join(f'"{r}"' for r in DEV_ROLES)
        (self.dir / "users.toml").write_text(
            f'[users.{DEV_USER}]\nroles = [{roles}]\npassword = "{hash_secret(secrets["password"])}"\n'
            f'tokens = ["{hash_secret(secrets["cli_token"])}"]\n')

    def _start_provider(self) -> str:
        require_clone("runfacts.dev.provider", "runfacts dev up")  # the simulator is not in the wheel
        args = [sys.executable, "-m", "runfacts.dev.provider.server", "--port", "0",
                "--ledger", str(self.dir / "ledger.jsonl")]
        env = {**self._base_env(self.secrets()), "RUNFACTS_PAYMENT_API_KEY": PAYMENT_API_KEY}
        with (self.logs / "payment-sim.log").open("ab") as sink:
            self.provider = subprocess.Popen(args, env=env, stdout=subprocess.PIPE, stderr=sink,
                                             preexec_fn=_die_with_parent)  # noqa: PLW1509
        line = self.provider.stdout.readline().decode() if self.provider.stdout else ""
        if "listening on " not in line:
            raise DevError(f"the payment simulator did not start; see {self.logs / 'payment-sim.log'}")
        url = line.rsplit(" ", 1)[-1].strip()
        self.say(f"payment simulator: {url} (serves the packaged payments.refund tool)")
        return url

    # --- processes ---------------------------------------------------------------------------

    def spawn(self, worker: Worker) -> None:
        worker.starts += 1
        log = self.logs / f"{worker.name}.log"
        with log.open("ab") as sink:
            sink.write(f"--- runfacts dev up: start {worker.starts} of {worker.name} ---\n".encode())
            sink.flush()
            worker.proc = subprocess.Popen(worker.args, env=worker.env, stdout=sink, stderr=subprocess.STDOUT,
                                           preexec_fn=_die_with_parent)  # noqa: PLW1509
        worker.started_at = time.monotonic()
        worker.restart_at = None
        self._write_pids()

    def _write_pids(self) -> None:
        pids = {n: w.proc.pid for n, w in self.workers.items() if w.proc is not None and w.proc.poll() is None}
        if self.provider is not None:
            pids["payment-sim"] = self.provider.pid
        pids["supervisor"] = os.getpid()
        (self.dir / "pids.json").write_text(json.dumps(pids))

    def _ready(self, worker: Worker) -> bool:
        if worker.proc is None or worker.proc.poll() is not None:
            return False
        if worker.name == "console":
            return port_open("127.0.0.1", self.console_port)
        text = (self.logs / f"{worker.name}.log").read_text(errors="replace")
        last_start = text.rsplit(f"--- runfacts dev up: start {worker.starts} of", 1)[-1]
        return ("owns partitions" if worker.name == "agent" else "assigned partitions") in last_start

    def wait_ready(self) -> None:
        deadline = time.monotonic() + self.options.ready_timeout_s
        waiting = set(self.workers)
        while waiting and not self.stopping.is_set():
            for name in sorted(waiting):
                worker = self.workers[name]
                if self._ready(worker):
                    waiting.discard(name)
                elif worker.proc is not None and worker.proc.poll() is not None:
                    tail = (self.logs / f"{name}.log").read_text(errors="replace").splitlines()[-15:]
                    raise DevError(f"{name} exited with code {worker.proc.returncode} before it was ready; "
                                   f"its log {self.logs / (name + '.log')} ends:\n" + "\n".join(tail))
            if time.monotonic() > deadline:
                raise DevError(f"not ready within {self.options.ready_timeout_s:g} s: {', '.join(sorted(waiting))}; "
                               f"see the logs in {self.logs}")
            self.stopping.wait(0.2)

    def _stat(self, watched: Path | None = None) -> float:
        watched = watched or self.watched
        try:
            return watched.stat().st_mtime if watched is not None else 0.0
        except OSError:
            return 0.0

    def supervise_once(self) -> None:
        """One pass: restart exited workers once their backoff passed; reload on a tools change."""
        now = time.monotonic()
        for worker in self.workers.values():
            if worker.proc is None or worker.proc.poll() is None:
                continue
            if worker.restart_at is None:
                ran = now - worker.started_at
                if ran >= STABLE_AFTER_S:
                    worker.backoff_s = BACKOFF_FIRST_S
                code = worker.proc.returncode
                last = self._last_line(worker.name)
                self.say(f"{worker.name} exited (code {code}) after {ran:.1f} s; restarting in {worker.backoff_s:g} s "
                         f"(log {self.logs / (worker.name + '.log')}{': ' + last if last else ''})")
                worker.restart_at = now + worker.backoff_s
                worker.backoff_s = min(worker.backoff_s * 2, BACKOFF_MAX_S)
            elif now >= worker.restart_at:
                self.spawn(worker)
                self.say(f"{worker.name} restarted (pid {worker.proc.pid}, start {worker.starts})")  # type: ignore[union-attr]
        if not self.options.reload:
            return
        restart: list[str] = []
        if self.watched is not None and (mtime := self._stat()) != self._mtime:
            self._mtime = mtime
            restart = [n for n in ("decider", "dispatcher", "agent") if n in self.workers]
            self.say(f"reloading: {self.watched} changed; restarting the {', the '.join(restart)}")
        if self.agent_watched is not None and (mtime := self._stat(self.agent_watched)) != self._agent_mtime:
            self._agent_mtime = mtime
            if "agent" not in restart:
                restart.append("agent")
                self.say(f"reloading: {self.agent_watched} changed; restarting the agent")
        for name in restart:
            self._terminate(self.workers[name])
            self.spawn(self.workers[name])

    def _last_line(self, name: str) -> str:
        """The last line a worker logged (what it died of, mostly), at most 300 characters."""
        try:
            with (self.logs / f"{name}.log").open("rb") as log:
                log.seek(0, os.SEEK_END)
                log.seek(max(0, log.tell() - 4096))
                lines = [ln for ln in log.read().decode(errors="replace").splitlines()
                         if ln.strip() and not ln.startswith("--- runfacts dev up")]
        except OSError:
            return ""
        return lines[-1].strip()[:300] if lines else ""

    def _terminate(self, worker: Worker) -> None:
        proc = worker.proc
        if proc is None:
            return
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(STOP_GRACE_S)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(5)

    def stop(self) -> None:
        """SIGTERM to every child in reverse start order (SIGKILL after the grace period)."""
        for worker in reversed(list(self.workers.values())):
            self._terminate(worker)
        if self.provider is not None and self.provider.poll() is None:
            self.provider.terminate()
            try:
                self.provider.wait(5)
            except subprocess.TimeoutExpired:
                self.provider.kill()
                self.provider.wait(5)

    def banner(self) -> str:
        secrets = self.secrets()
        env_file = self.dir / "env.sh"
        exports = "\n".join(f"export {k}='{v}'" for k, v in self.env().items())
        env_file.write_text(exports + "\n")
        return (f"ready: console http://127.0.0.1:{self.console_port} (user {DEV_USER}, password "
                f"{secrets['password']})\n"
                f"serving: {self.options.tools or 'runfacts.tools.refund:registry (payment simulator)'}"
                f"{', agent ' + self.options.agent if self.options.agent else ''}\n"
                f"logs: {self.logs}\n"
                f"in another shell: source {env_file}\n{exports}\n"
                "Ctrl-C stops everything")

    def run(self) -> int:
        """Set up, start, supervise until SIGINT/SIGTERM; 0 after a clean stop."""
        def on_signal(_signum: int, _frame: object) -> None:
            self.stopping.set()

        old = {s: signal.signal(s, on_signal) for s in (signal.SIGINT, signal.SIGTERM)}
        try:
            self.setup()
            for worker in self.workers.values():
                if not self.stopping.is_set():
                    self.spawn(worker)
            self.wait_ready()
            if not self.stopping.is_set():
                self.say(self.banner())
            while not self.stopping.is_set():
                self.supervise_once()
                self.stopping.wait(0.2)
            self.say("stopping ...")
            return 0
        finally:
            self.stop()
            (self.dir / "pids.json").unlink(missing_ok=True)
            for sig, handler in old.items():
                signal.signal(sig, handler)
