"""A stack serving a tool registry: the real decider (reading the manifest the registry
exports) and the real dispatcher (`runfacts worker dispatcher --tools ...`) as subprocesses,
the harness outbox and its relay, on a real broker (the demo's machinery, other tools)."""

from __future__ import annotations

import hashlib
import subprocess
import sys
from datetime import UTC, datetime
from itertools import count
from pathlib import Path
from typing import Any

from runfacts.connectors.outbox.commands import CommandOutbox
from runfacts.demo.readers import EventLog, has
from runfacts.demo.stack import DemoOptions, DemoStack
from runfacts.processors.decider.context import DEFAULT_VERSIONS
from runfacts.schemas import commands as cmd
from runfacts.schemas.common import Actor, BudgetAmounts, CommandBase, EventBase
from runfacts.schemas.models import new_command, payload_class
from runfacts.security.approvals import ApprovalRequest, sign_approval

REPO = Path(__file__).resolve().parents[2]
BILLING = "examples.billing_tools:registry"
AGENT = Actor(subjectId="agent-harness", roles=("agent",), authSource="agent-harness")
SUPPORT = Actor(subjectId="alice", roles=("support_agent",), authSource="dashboard")


def export_manifest(tools: str, out: Path) -> Path:
    """`runfacts capabilities export TOOLS --out OUT` as a user runs it."""
    subprocess.run([sys.executable, "-m", "runfacts.cli", "capabilities", "export", tools, "--out", str(out)],
                   check=True, cwd=REPO, capture_output=True)
    return out


class ToolStack(DemoStack):
    """Decider + dispatcher serving `tools`; `send`/`propose`/`wait` drive runs."""

    def __init__(self, options: DemoOptions, tools: str = BILLING, manifest_file: bool = True,
                 **dispatcher_env: str) -> None:
        super().__init__(options)
        self.tools = tools
        self.manifest_file = manifest_file  # False: both workers read the registry (--tools)
        self.dispatcher_env = {"PYTHONPATH": str(REPO), "BILLING_LEDGER": str(self.dir / "ledger.db"),
                               **dispatcher_env}
        self._ids = count(1)
        self.log: EventLog | None = None

    def start(self) -> None:
        self.dir.mkdir(parents=True, exist_ok=True)
        manifest = ["--capabilities", str(export_manifest(self.tools, self.dir / "capabilities.toml"))]
        self._topics()
        self.harness = CommandOutbox.open(self.dir / "harness.db", self.names)
        self._start_relay()
        self._spawn_worker("decider", manifest if self.manifest_file else ["--tools", self.tools],
                           **self.options.signing_env)
        self.start_dispatcher()
        self.log = EventLog(self.options.kafka, self.names.events)

    def start_dispatcher(self, crash_at: str = "") -> None:
        self.dispatcher_starts += 1
        crash = {"RUNFACTS_CRASH_AT": crash_at, "RUNFACTS_CRASH_MARKER": str(self.dir / "crash.marker")}
        options = ["--tools", self.tools, "--args-store", str(self.dir / "harness.db")]
        if self.manifest_file:
            options += ["--capabilities", str(self.dir / "capabilities.toml")]
        self._spawn_worker("dispatcher", options, f"dispatcher-{self.dispatcher_starts}.log",
                           RUNFACTS_CONSUME_BATCH="1", **self.dispatcher_env, **(crash if crash_at else {}))

    def stop(self) -> None:
        if self.log is not None:
            self.log.close()
            self.log = None
        super().stop()

    # --- driving runs -------------------------------------------------------------------

    def command(self, cls: type[CommandBase], run_id: str, actor: Actor = AGENT, **payload: Any) -> Any:
        return new_command(cls, commandId=f"{run_id}-c{next(self._ids)}", runId=run_id, actor=actor,
                           issuedAt=datetime.now(UTC), correlationId=f"{run_id}-intent",
                           payload=payload_class(cls)(**payload))

    def open_run(self, run_id: str) -> None:
        assert self.harness is not None
        conclusion = f"{run_id}: credit the customer for the outage"
        self.harness.send(
            self.command(cmd.CreateRun, run_id, goalRef=f"goal:{run_id}", goalSummary="Credit the outage",
                         userId="customer-7", budget=BudgetAmounts(toolCalls=5, steps=20),
                         versions=DEFAULT_VERSIONS),
            self.command(cmd.RecordReasoning, run_id, reasoningObjectId=f"ro-{run_id}", goalRef=f"goal:{run_id}",
                         evidenceRefs=("ticket:T-1",), conclusionRef=f"reasoning/{run_id}",
                         conclusionHash=hashlib.sha256(conclusion.encode()).hexdigest()))

    def propose(self, run_id: str, call_id: str, capability: str, arguments: dict[str, Any],
                risk: str = "high") -> str:
        """Store the arguments and propose the call in one outbox transaction; the argsHash."""
        assert self.harness is not None
        stored = self.harness.propose(lambda ref, digest: self.command(
            cmd.ProposeToolCall, run_id, toolCallId=call_id, capabilityId=capability,
            reasoningObjectId=f"ro-{run_id}", argsHash=digest, argsRef=ref, target=arguments.get("account", "-"),
            action=capability.rsplit(".", 1)[-1], risk=risk, summary=f"{capability} {arguments}"), arguments)
        return stored.hash

    def approve(self, run_id: str, approval_id: str, args_hash: str) -> None:
        """A support agent's approval, signed as the dashboard signs it."""
        assert self.harness is not None
        now_ms = int(datetime.now(UTC).timestamp() * 1000)
        token = sign_approval(ApprovalRequest(run_id, approval_id, args_hash, "approve", SUPPORT.subjectId),
                              now_ms, environ=self.options.signing_env)
        self.harness.send(self.command(cmd.ResumeRun, run_id, SUPPORT, approvalId=approval_id,
                                       decision="approve", argsHash=args_hash, approvalToken=token))

    def wait(self, run_id: str, what: str, event_type: str, timeout: float = 60.0,
             **fields: Any) -> list[EventBase]:
        assert self.log is not None
        return self.log.wait(run_id, what, has(event_type, **fields), timeout)

    def event(self, run_id: str, event_type: str) -> Any:
        assert self.log is not None
        return next(e for e in self.log.of(run_id) if e.eventType == event_type)
