"""What the refund demo runs: topics under its own prefix, the payment simulator, and the
run decider, the dispatcher and the projector as `runfacts worker ...` subprocesses (and, on
request, the memory projector), and
the harness's outbox relay.

Secrets are configured the way a deployment would: the payment API key and the dashboard
session secret in every process's environment, the approval signing keyring in the decider's
(the story signs its approvals with it, as the dashboard would), the audit's digest key in
the projector's. Command source keys (docs/security.md, "Commands signed by their source"): the decider
holds every source's, the
dispatcher only its own, the story's client (harness and approving UI) the agent harness's and
the dashboard's; every command is signed and the decider refuses any that is not. None may
reach a topic.

Every process logs to its own file under the demo's work directory; `stop()` ends what
`start()` started (SIGTERM, then SIGKILL after a grace period) and is safe to call twice.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from runfacts.connectors.outbox.commands import CommandOutbox
from runfacts.connectors.relay.loop import Relay, RelaySettings
from runfacts.dev import require_clone
from runfacts.privacy.keys import ENV_PII_KEYS
from runfacts.privacy.store import protector_if_configured
from runfacts.processors.decider.app import APP_NAME as DECIDER_APP
from runfacts.processors.dispatcher.app import app_name as dispatcher_app_name
from runfacts.processors.policy.capabilities import load_capabilities
from runfacts.processors.policy.keyring import ENV_KEYS, ENV_SOURCE_KEYS, new_secret
from runfacts.processors.policy.sources import SourceKeys, parse_source_keys
from runfacts.projections.projector.app import app_name as projector_app_name
from runfacts.projections.projector.memory import app_name as memory_app_name
from runfacts.schemas.errors import RunfactsError
from runfacts.settings import KafkaSettings
from runfacts.topics import TopicNames, apply_topics, changelog_spec, delete_topics, runfacts_topics

API_KEY = "sk-demo-not-a-secret"
DISPATCH_CRASH_POINT = "dispatcher.after_call_before_record"
REFUND_TTL_MS = 600_000  # the refund story's approval must not expire on a slow machine
REFUND_CAPABILITY = """
[[capability]]
capabilityId = "{capability}"
risk = "high"
requiredRole = "support_agent"
needsApproval = true
reconciliationDeadlineMs = 60000
approvalTtlMs = {ttl_ms}
selfApproval = false
[capability.retry]
maxAttempts = 4
baseBackoffMs = 200
maxBackoffMs = 2000
deadlineMs = 10000
"""


def demo_manifest(expiring_ttl_ms: int) -> str:
    """The demo's capabilities: the refund, and the same refund with a short approval window
    (the expiry story); both with the refund's argument schema (the approver's display)."""
    schema = load_capabilities().get("payments.refund").argument_schema or "{}"
    line = f"argumentSchema = {json.dumps(schema)}\n[capability.retry]"
    return (REFUND_CAPABILITY.format(capability="payments.refund", ttl_ms=REFUND_TTL_MS)
            + REFUND_CAPABILITY.format(capability="payments.refund.expiring", ttl_ms=expiring_ttl_ms)
            ).replace("[capability.retry]", line)


class StackError(RunfactsError):
    """A demo process did not start or answer; the message names it and its log."""


@dataclass
class DemoOptions:
    """How the demo runs (the integration test shortens nothing: same story, same checks)."""

    prefix: str = ""
    partitions: int = 3
    approval_ttl_ms: int = 5_000
    workdir: Path | None = None
    keep_topics: bool = False
    kafka: KafkaSettings = field(default_factory=KafkaSettings)
    approval_keys: str = field(default="", repr=False)
    """The decider's approval keyring JSON (default: a fresh random key per demo)."""
    session_secret: str = field(default="", repr=False)
    """RUNFACTS_DASHBOARD_SESSION_SECRET of every process (default: fresh)."""
    audit_pii_key: str = field(default="", repr=False)
    """The projector's RUNFACTS_AUDIT_PII_KEY (default: fresh): personal values in audit records
    become HMAC digests, which nobody without the key can match against guessed values."""
    source_keys: str = field(default="", repr=False)
    """Command source keys by auth source, RUNFACTS_SOURCE_KEYS JSON (default: a fresh key for
    each of the demo's sources: agent-harness, dashboard, dispatcher)."""
    client_timeout_s: float = 30.0
    """How long the story's client waits for each answer (a loaded machine starts workers slowly)."""
    privacy_keys: str = field(default="", repr=False)
    """RUNFACTS_PII_KEYS JSON of the demo's writers (`runfacts demo` sets fresh ones; empty: off):
    personal fields are sealed at the source (runfacts.privacy): the story's client and UI, and
    the dispatcher (its reports); the decider and projector get none (they never decrypt)."""

    def __post_init__(self) -> None:
        self.prefix = self.prefix or f"demo-{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid() % 10000}"
        self.workdir = self.workdir or Path(tempfile.gettempdir()) / "runfacts-demo" / self.prefix
        self.approval_keys = self.approval_keys or json.dumps({"current": "demo-1",
                                                               "keys": {"demo-1": new_secret()}})
        self.session_secret = self.session_secret or new_secret()
        self.audit_pii_key = self.audit_pii_key or new_secret()
        self.source_keys = self.source_keys or json.dumps({
            source: {"current": f"{source}-demo-1", "keys": {f"{source}-demo-1": new_secret()}}
            for source in ("agent-harness", "dashboard", "dispatcher")})

    def source_env(self, *sources: str) -> dict[str, str]:
        """RUNFACTS_SOURCE_KEYS holding these sources' keys (none given: every source's)."""
        keys = json.loads(self.source_keys)
        return {ENV_SOURCE_KEYS: json.dumps({s: k for s, k in keys.items() if not sources or s in sources})}

    def client_sources(self) -> SourceKeys:
        """What the story's client signs with: the agent harness and the approving UI (dashboard)."""
        return parse_source_keys(self.source_env("agent-harness", "dashboard")[ENV_SOURCE_KEYS], "demo source keys")

    @property
    def privacy_env(self) -> dict[str, str]:
        """RUNFACTS_PII_KEYS of the demo's writers (the story's client and UI, the dispatcher)."""
        return {ENV_PII_KEYS: self.privacy_keys}

    @property
    def signing_env(self) -> dict[str, str]:
        """The environment an approving service signs with (`approval_signing.sign_approval`)."""
        return {ENV_KEYS: self.approval_keys}


class DemoStack:
    """The running demo: processes, the harness's outbox and its relay."""

    def __init__(self, options: DemoOptions) -> None:
        self.options = options
        self.names = TopicNames(options.prefix)
        self.dir: Path = options.workdir  # type: ignore[assignment]
        self.procs: dict[str, subprocess.Popen[bytes]] = {}
        self.provider_url = ""
        self.harness: CommandOutbox | None = None
        self.relay: Relay | None = None
        self._relay_thread: threading.Thread | None = None
        self._log_handler: logging.Handler | None = None
        self.dispatcher_starts = 0

    # --- lifecycle ------------------------------------------------------------------------

    def start(self) -> None:
        self.dir.mkdir(parents=True, exist_ok=True)
        manifest = demo_manifest(self.options.approval_ttl_ms)
        (self.dir / "capabilities.toml").write_text(manifest)
        self._topics()
        self.provider_url = self._start_provider()
        self.harness = CommandOutbox.open(self.dir / "harness.db", self.names, sources=self.options.client_sources(),
                                          protect=protector_if_configured(self.options.kafka, self.names.keys,
                                                                          self.options.privacy_env))
        self._start_relay()
        self._spawn_worker("decider", ["--capabilities", str(self.dir / "capabilities.toml")],
                           **self.options.signing_env, **self.options.source_env())
        self._spawn_worker("projector", [], RUNFACTS_AUDIT_PII_KEY=self.options.audit_pii_key)
        self.start_dispatcher(crash_at=DISPATCH_CRASH_POINT)

    def start_memory_projector(self) -> None:
        """The memory projector worker: events -> `<prefix>.memory` (what `rf.memory` reads). The
        refund story does not start it (it promotes no memory); the client's tests do."""
        self._spawn_worker("memory", [])

    def _topics(self) -> None:
        p = self.options.partitions
        specs = runfacts_topics(self.names, p)
        specs += [changelog_spec(name, p) for name in self._changelogs()]
        apply_topics(self.options.kafka, specs)

    def _apps(self) -> dict[str, tuple[str, ...]]:
        """Each worker's engine application name and its stores with a changelog of their own
        (the decider's `runs` store has the run-state topic as its changelog)."""
        prefix = self.names.prefix
        decider = DECIDER_APP if prefix == "runfacts" else f"{prefix}-run-decider"
        return {decider: ("orphans", "__timers"),
                dispatcher_app_name(prefix): ("runs", "progress", "__timers"),
                projector_app_name(prefix): ("heads", "trajectories", "__timers"),
                memory_app_name(prefix): ("memories", "__timers")}

    def _changelogs(self) -> list[str]:
        return [f"{app}-{store}-changelog" for app, stores in self._apps().items() for store in stores]

    def topic_names(self) -> list[str]:
        """Every topic the demo writes: the runfacts topics and the workers' store changelogs."""
        specs = runfacts_topics(self.names, self.options.partitions)
        return [s.name for s in specs] + self._changelogs()

    def stop(self) -> None:
        """End every process and thread this stack started; delete its topics unless kept."""
        for name in list(self.procs):
            self._terminate(name)
        if self.relay is not None:
            self.relay.stop()
            if self._relay_thread is not None:
                self._relay_thread.join(10)
            self.relay = None
        if self.harness is not None:
            self.harness.close()
            self.harness = None
        if self._log_handler is not None:
            relay_log = logging.getLogger("runfacts.relay")
            relay_log.removeHandler(self._log_handler)
            relay_log.propagate = True
            self._log_handler.close()
            self._log_handler = None
        if not self.options.keep_topics:
            delete_topics(self.options.kafka, self.topic_names())

    def _terminate(self, name: str) -> None:
        proc = self.procs.pop(name)
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(5)

    # --- processes --------------------------------------------------------------------

    def _env(self, **extra: str) -> dict[str, str]:
        # the demo arms its own crash point and signs no approvals
        env = {k: v for k, v in os.environ.items()
               if not k.startswith(("RUNFACTS_CRASH", "RUNFACTS_APPROVAL_KEYS", "RUNFACTS_AUDIT_PII_KEY",
                                    "RUNFACTS_SOURCE_KEYS", "RUNFACTS_PII_KEYS"))}
        env.update({"RUNFACTS_KAFKA_BOOTSTRAP_SERVERS": self.options.kafka.bootstrap_servers,
                    "RUNFACTS_STATE_DIR": str(self.dir / "state"), "RUNFACTS_COMMIT_INTERVAL_MS": "50",
                    "RUNFACTS_POLL_TIMEOUT_MS": "50", "RUNFACTS_PAYMENT_API_KEY": API_KEY,
                    "RUNFACTS_DASHBOARD_SESSION_SECRET": self.options.session_secret,
                    "PYTHONUNBUFFERED": "1"})
        if self.options.kafka.config:
            env["RUNFACTS_KAFKA_CONFIG"] = json.dumps(self.options.kafka.config)
        env.update(extra)
        return env

    def _spawn(self, name: str, args: list[str], env: dict[str, str], log: str,
               stdout: int = subprocess.DEVNULL) -> subprocess.Popen[bytes]:
        with (self.dir / log).open("ab") as sink:
            proc = subprocess.Popen(args, env=env, stdout=stdout, stderr=sink)
        self.procs[name] = proc
        return proc

    def _spawn_worker(self, kind: str, options: list[str], log: str = "", **env: str) -> None:
        """`runfacts worker <kind> --prefix <demo prefix> <options>` as a subprocess."""
        args = [sys.executable, "-m", "runfacts.cli", "worker", kind, "--prefix", self.names.prefix, *options]
        static = {"group.instance.id": f"{self.names.prefix}-{kind}"}  # a restart replaces it at once
        self._spawn(kind, args, self._env(RUNFACTS_INSTANCE_ID=kind, RUNFACTS_CONSUMER=json.dumps(static),
                                          **env), log or f"{kind}.log")

    def start_dispatcher(self, crash_at: str = "") -> None:
        """Start (or restart) the dispatcher worker; `crash_at` arms a crash point in it."""
        self.dispatcher_starts += 1
        crash = {"RUNFACTS_CRASH_AT": crash_at, "RUNFACTS_CRASH_MARKER": str(self.dir / "crash.marker")}
        options = ["--provider-url", self.provider_url, "--args-store", self.dispatcher_args_store(),
                   "--capabilities", str(self.dir / "capabilities.toml")]
        self._spawn_worker("dispatcher", options, f"dispatcher-{self.dispatcher_starts}.log",
                           RUNFACTS_CONSUME_BATCH="1", RUNFACTS_TRANSACTION_TIMEOUT_MS="30000",
                           RUNFACTS_PAYMENT_READ_TIMEOUT_MS="3000", **self.options.source_env("dispatcher"),
                           **self.options.privacy_env, **(crash if crash_at else {}))

    def dispatcher_args_store(self) -> str:
        """The argument store the dispatcher reads (the harness's SQLite file)."""
        return str(self.dir / "harness.db")

    def wait_exit(self, name: str, timeout: float) -> int | None:
        """The process's exit code once it exits within `timeout` (None: still running)."""
        try:
            return self.procs[name].wait(timeout)
        except subprocess.TimeoutExpired:
            return None

    def forget(self, name: str) -> None:
        self.procs.pop(name, None)

    def _start_provider(self) -> str:
        require_clone("runfacts.dev.provider", "runfacts demo")  # the simulator is not in the wheel
        args = [sys.executable, "-m", "runfacts.dev.provider.server", "--port", "0",
                "--ledger", str(self.dir / "ledger.jsonl")]
        proc = self._spawn("provider", args, self._env(), "payment-sim.log", subprocess.PIPE)
        line = proc.stdout.readline().decode() if proc.stdout else ""
        if "listening on " not in line:
            raise StackError(f"payment simulator did not start; see {self.dir / 'payment-sim.log'}")
        return line.rsplit(" ", 1)[-1].strip()

    def _start_relay(self) -> None:
        settings = RelaySettings(db=str(self.dir / "harness.db"), bootstrap=self.options.kafka.bootstrap_servers,
                                 poll_interval_s=0.05, lease_ttl_s=5.0,
                                 transactional_id=f"{self.names.prefix}-harness-relay",
                                 producer_config=dict(self.options.kafka.config))
        self._log_handler = handler = logging.FileHandler(self.dir / "relay.log")
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
        relay_log = logging.getLogger("runfacts.relay")
        relay_log.addHandler(handler)
        relay_log.setLevel(logging.INFO)
        relay_log.propagate = False
        self.relay = Relay(settings, holder="demo-harness")
        self._relay_thread = threading.Thread(target=self.relay.run, name="outbox-relay", daemon=True)
        self._relay_thread.start()

    # --- the provider's control API -----------------------------------------------------------

    def provider(self, method: str, path: str, body: dict[str, Any] | None = None) -> Any:
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(self.provider_url + path, data=data, method=method,
                                         headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=5) as response:
            return json.loads(response.read())

    def ledger(self) -> list[dict[str, Any]]:
        """The provider's executed refunds (its ground truth)."""
        return list(self.provider("GET", "/_ledger")["refunds"])
