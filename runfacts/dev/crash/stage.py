"""One crash-matrix scenario's world: fresh topics, its processes, the oracle over its logs.

A `Stage` owns a topic prefix of its own (nothing is shared with other rows or tests), a work
directory (state stores, logs, crash markers, the provider's ledger) and every process it
starts; `close()` ends them. `check()` snapshots the committed logs and asks the oracle;
`settle()` polls `check()` until the topics agree with it (or the time is up).
"""

from __future__ import annotations

import sys
import time
import uuid
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from subprocess import DEVNULL, Popen

from runfacts.crashpoints import arm
from runfacts.dev.crash.kafka import produce, provision
from runfacts.dev.crash.oracle import Expected, Verdict, expect, verdict
from runfacts.dev.crash.procs import Provider, Worker, child_env
from runfacts.dev.crash.workload import Input
from runfacts.logread import read_to_end
from runfacts.processors.decider.app import DeciderShell
from runfacts.projections.user_view import publisher
from runfacts.settings import KafkaSettings
from runfacts.topics import TopicNames
from runfacts.workers import decide_context

DECIDER_APP = "runfacts.workers:decider"
DISPATCHER_APP = "runfacts.workers:dispatcher"
PROJECTOR_APP = "runfacts.workers:projector"
# a commit every ~3 batches: a crash between commits leaves produced, uncommitted outputs behind
ENGINE_ENV = {"RUNFACTS_COMMIT_EVERY": "25", "RUNFACTS_CONSUME_BATCH": "10", "RUNFACTS_COMMIT_INTERVAL_MS": "1000",
              "RUNFACTS_POLL_TIMEOUT_MS": "50", "RUNFACTS_TRANSACTION_TIMEOUT_MS": "10000"}
FAST_COMMITS = {"RUNFACTS_COMMIT_EVERY": "10", "RUNFACTS_COMMIT_INTERVAL_MS": "100"}
Ready = Callable[[Expected], bool]


@dataclass(frozen=True)
class Lab:
    """Where and how big: the broker, the work directory, runs per scenario, partitions; the
    three-broker cluster's RUNFACTS_HOME for the cluster rows (None: each such row starts a
    cluster of its own under its work directory and stops it when it ends)."""

    bootstrap: str
    workdir: Path
    runs: int = 6
    partitions: int = 3
    settle_s: float = 90.0
    cluster_home: Path | None = None


class Stage:
    """Topics, processes and oracle of one scenario (see the module docstring)."""

    def __init__(self, lab: Lab, key: str, bootstrap: str = "", replication: int = 1) -> None:
        uid = uuid.uuid4().hex[:6]
        self.lab = lab
        self.bootstrap = bootstrap or lab.bootstrap
        self.replication = replication
        self.prefix = f"cx{uid}"
        self.names = TopicNames(self.prefix)
        self.dir = lab.workdir / f"{key}-{uid}"
        self.dir.mkdir(parents=True, exist_ok=True)
        self.shell = DeciderShell(self.names, decide_context())
        self.workers: list[Worker] = []
        self.others: list[Popen[bytes]] = []
        self.provider: Provider | None = None
        self.last: Verdict | None = None
        self.restarts: list[tuple[str, int | None]] = []
        self.expected = Expected()

    def provision(self) -> Stage:
        provision(self.bootstrap, self.names, self.lab.partitions, self.replication)
        return self

    def send(self, inputs: Iterable[Input], timeout_s: float = 30.0) -> int:
        return produce(self.bootstrap, self.names.commands, inputs, timeout_s)

    def worker(self, name: str, app: str = DECIDER_APP, guarantee: str = "exactly_once",
               params: Mapping[str, str] | None = None, static: bool = True,
               env: Mapping[str, str] | None = None) -> Worker:
        """A worker of this stage (not started); `env` adds to the engine settings of the matrix."""
        worker = Worker(name, app, {"prefix": self.prefix, **(params or {})}, self.bootstrap, self.dir,
                        guarantee, {**ENGINE_ENV, **(env or {})}, static)
        self.workers.append(worker)
        return worker

    def start_provider(self) -> str:
        self.provider = Provider(self.dir)
        return self.provider.start()

    def relay(self, db: Path | str, table: str, crash_at: str = "", after: int = 1,
              hold_until: str = "", exit_when_idle: bool = True) -> Popen[bytes]:
        """The outbox relay as a process (`runfacts outbox relay`), optionally armed: it dies at
        `crash_at`, or with `hold_until` waits there until that file exists. It writes
        `relay.marker` when it gets there. Without `exit_when_idle` it runs until stopped."""
        args = [sys.executable, "-m", "runfacts.cli", "outbox", "relay", "--db", str(db),
                "--bootstrap", self.bootstrap, "--table", table, "--batch-size", "10", "--lease-ttl", "2",
                "--poll-interval", "0.1", *(["--exit-when-idle"] if exit_when_idle else [])]
        armed = {**arm(crash_at, after, hold_until), "RUNFACTS_CRASH_MARKER": str(self.dir / "relay.marker")}
        env = child_env(**(armed if crash_at else {}))
        with (self.dir / f"relay-{len(self.others) + 1}.log").open("wb") as sink:
            proc = Popen(args, env=env, stdout=DEVNULL, stderr=sink)
        self.others.append(proc)
        return proc

    def check(self, *, allow_duplicates: bool = False) -> Verdict:
        """Snapshot commands, events, state and dead letters; the oracle's verdict on them."""
        n = self.names
        logs = read_to_end(self.bootstrap, [n.commands, n.events, n.state, n.dlq, n.user_view])
        self.expected = expect(logs[n.commands], self.shell, logs[n.events])
        self.last = verdict(self.expected, logs[n.events], logs[n.state], logs[n.dlq], n.commands,
                            allow_duplicates=allow_duplicates, views=logs[n.user_view],
                            publish=publisher(n.user_view))
        return self.last

    def audit(self, live: bool = False) -> list[str]:
        """Build the audit chain from the events log (the audit replay into `<prefix>.audit`),
        then verify it with `runfacts audit verify`'s check; its findings, if any. `live`: the
        stage ran the projector, whose audit topic is verified as it stands (no replay)."""
        from runfacts.projections.audit.verify import VerifySettings, verify
        from runfacts.projections.projector.replay import ReplaySettings, replay

        kafka = KafkaSettings(bootstrap_servers=self.bootstrap, topic_prefix=self.prefix)
        if not live:
            replay(kafka, ReplaySettings("audit", self.names.audit, self.names.events))
        report = verify(kafka, VerifySettings(events_topic=self.names.events, audit_topic=self.names.audit))
        found = [f"audit: {f}" for f in report.findings]
        if report.runs_verified != len(self.expected.events):
            found.append(f"audit: {report.runs_verified} chains verified, oracle has {len(self.expected.events)} runs")
        return found

    def settle(self, *, allow_duplicates: bool = False, ready: Ready | None = None,
               timeout_s: float | None = None, supervise: tuple[Worker, ...] = ()) -> Verdict:
        """Poll `check` until the topics agree with the oracle and `ready(expected)` holds;
        a supervised worker that exits meanwhile is restarted (its exit code is kept in `restarts`)."""
        deadline = time.monotonic() + (timeout_s or self.lab.settle_s)
        while True:
            for worker in supervise:
                if not worker.alive():
                    self.restarts.append((worker.name, worker.wait(0)))
                    worker.start()
            result = self.check(allow_duplicates=allow_duplicates)
            if result.ok and (ready is None or ready(self.expected)):
                return result
            if time.monotonic() > deadline:
                return result
            time.sleep(0.5)

    def close(self) -> None:
        """End every process this stage started (SIGTERM, then SIGKILL)."""
        for worker in self.workers:
            worker.stop(15)
        for proc in self.others:
            if proc.poll() is None:
                proc.kill()
                proc.wait(10)
        if self.provider is not None:
            self.provider.stop()
