"""The run decider and the dispatcher wired together through two broker-free test drivers,
with the payment simulator in-process (real HTTP on loopback) and a real SQLite argument store.

    loop = Loop(tmp_path)
    loop.send(create(), propose_refund(), resume())   # commands -> events -> commands ... settled
    assert loop.events()[-1] == "verification.updated"
    loop.advance(1_000)                              # move both clocks, fire due timers, settle
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from decider_support import AGENT, CTX, REFUND_ARGS, SUPPORT, T0, USER, command

from runfacts.connectors.args_store import ArgsStore
from runfacts.connectors.refund_adapter import RefundAdapter, RefundAdapterSettings
from runfacts.dev.provider.server import PaymentSimulator, SimSettings
from runfacts.processors.decider import DecideContext
from runfacts.processors.decider.app import DeciderShell
from runfacts.processors.dispatcher.adapters import ToolAdapter, ToolRequest
from runfacts.processors.dispatcher.app import DispatcherSettings, DispatcherShell
from runfacts.processors.dispatcher.core import PollPolicy, VerifyPolicy
from runfacts.processors.dispatcher.pool import ToolPool
from runfacts.processors.engine.testdriver import TestDriver
from runfacts.processors.policy.retry import args_hash
from runfacts.processors.policy.sources import SourceKeys, sign
from runfacts.schemas import codec
from runfacts.schemas import commands as cmd
from runfacts.schemas.common import BudgetAmounts, CommandBase, EventBase
from runfacts.topics import TopicNames

NAMES = TopicNames("t")
T0_MS = int(T0.timestamp() * 1000)
API_KEY = "sk-test-dispatcher"
RUN = "run-dsp-1"
CALL = "tool-call-031"
VERIFY = VerifyPolicy(first_ms=200, max_ms=1_000, deadline_ms=10_000)
POOLED = {"on": False}  # run calls off the transaction (ToolPool); test modules parametrize it


class SimulatedCrash(BaseException):
    """Raised by the crash hook: the process 'dies' at a named point (nothing committed)."""


@dataclass
class CountingAdapter:
    """Wraps an adapter and counts what the dispatcher asked of it."""

    inner: ToolAdapter
    executed: list[ToolRequest] = field(default_factory=list)
    lookups: int = 0
    cancels: int = 0

    def execute(self, request: ToolRequest) -> Any:
        self.executed.append(request)
        return self.inner.execute(request)

    def lookup(self, external_request_id: str) -> Any:
        self.lookups += 1
        return self.inner.lookup(external_request_id)

    def cancel(self, external_request_id: str) -> bool:
        self.cancels += 1
        return self.inner.cancel(external_request_id)


class Loop:
    """Decider + dispatcher drivers; `send` pipes commands and forwards outputs until quiet."""

    def __init__(self, tmp: Path, *, incarnation: int = 1_000, max_amount_minor: int = 1_000_000,
                 read_timeout_ms: int = 2_000, api_key: str = API_KEY, crash_at: str = "",
                 ctx: DecideContext = CTX, pooled: bool | None = None, sources: SourceKeys | None = None,
                 protect: Any = None) -> None:
        self.sources = sources  # the decider verifies with all, the dispatcher signs with its own
        self.protect = protect  # a runfacts.privacy Protector: the harness's and the dispatcher's seal
        self.pooled = POOLED["on"] if pooled is None else pooled
        self.pool: ToolPool | None = None
        self.sim = PaymentSimulator(SimSettings(api_key=API_KEY, max_amount_minor=max_amount_minor))
        self.sim.start()
        self.args = ArgsStore.open(tmp / "args.db")
        self._adapter_settings = RefundAdapterSettings(url=self.sim.url, api_key=api_key,
                                                       read_timeout_ms=read_timeout_ms)
        self.decider = TestDriver(DeciderShell(NAMES, ctx, sources=sources).application(), start_ms=T0_MS)
        self.events_seen = 0
        self.commands_seen = 0
        self.dispatcher = self._dispatcher(incarnation, crash_at)

    def _dispatcher(self, incarnation: int, crash_at: str) -> TestDriver:
        self.adapter = CountingAdapter(RefundAdapter(self._adapter_settings))
        settings = DispatcherSettings(names=NAMES, catalog=CTX.capabilities, incarnation=incarnation,
                                      instance=f"dispatcher-{incarnation}", verify=VERIFY,
                                      poll=PollPolicy(first_ms=0, max_ms=0),
                                      sources=None if self.sources is None else SourceKeys(
                                          {"dispatcher": self.sources.keyrings["dispatcher"]}))
        self.pool = ToolPool(2) if self.pooled else None
        self.shell = DispatcherShell(settings, {"payments.refund": self.adapter}, self.args,
                                     clock=lambda: self.decider.now_ms / 1000,
                                     crash=lambda point: _crash(point, crash_at), pool=self.pool,
                                     seal=self.protect)
        return TestDriver(self.shell.application(), start_ms=self.decider.now_ms)

    def restart_dispatcher(self, incarnation: int, crash_at: str = "") -> None:
        """A new incarnation (empty memory) on the old one's committed log and stores."""
        old = self.dispatcher
        new = self._dispatcher(incarnation, crash_at)
        new.log, new.backends, new._input_offsets = old.log, old.backends, old._input_offsets
        new.restart()
        self.dispatcher = new

    def close(self) -> None:
        self.sim.stop()
        self.args.close()

    def now(self) -> Any:
        from datetime import UTC, datetime

        return datetime.fromtimestamp(self.decider.now_ms / 1000, tz=UTC)

    def pipe(self, *commands: CommandBase) -> Loop:
        """Commands to the decider only (nothing forwarded yet)."""
        for c in commands:
            c = c if self.protect is None else self.protect(c)
            value = codec.encode(c)
            signed = None if self.sources is None else [*codec.headers(c),
                                                        *sign(self.sources, c.actor.authSource, value)]
            self.decider.pipe(NAMES.commands, value, c.runId.encode(), headers=signed)
        return self

    def send(self, *commands: CommandBase) -> Loop:
        return self.pipe(*commands).settle()

    def step(self) -> bool:
        """One round: new events to the dispatcher, then its new commands to the decider (headers
    travel with them, as in Kafka)."""
        events = self.decider.outputs(NAMES.events)[self.events_seen:]
        for record in events:
            self.dispatcher.pipe(NAMES.events, record.value, record.key, headers=record.headers)
            self.events_seen += 1
        commands = self.dispatcher.outputs(NAMES.commands)[self.commands_seen:]
        for record in commands:
            self.decider.pipe(NAMES.commands, record.value, record.key, headers=record.headers)
            self.commands_seen += 1
        return bool(events or commands)

    def settle(self, rounds: int = 50) -> Loop:
        """Forward events to the dispatcher and its commands to the decider until nothing moves
        (pooled: also until the calls running off the transaction answered and were collected)."""
        for _ in range(rounds):
            if self.step():
                continue
            if self.pool is None:
                return self
            assert self.pool.wait_idle(10), "a tool call did not answer within 10 s"
            if not self.dispatcher.advance(0):  # the `done:` timers of answered calls
                return self
        raise AssertionError("decider and dispatcher did not settle")

    def advance(self, ms: int) -> Loop:
        """Move both clocks by `ms`, firing due timers of each, then settle."""
        self.decider.advance(ms)
        self.dispatcher.advance(ms)
        return self.settle()

    def events(self, run: str = RUN) -> list[EventBase]:
        return [e for e in (codec.decode(r.value) for r in self.decider.outputs(NAMES.events))
                if e.runId == run]

    def types(self, run: str = RUN) -> list[str]:
        return [e.eventType for e in self.events(run)]

    def commands(self) -> list[CommandBase]:
        return [codec.decode(r.value) for r in self.dispatcher.outputs(NAMES.commands)]

    def rejections(self) -> list[str]:
        return [e.payload.reasonCode for e in self.events() if e.eventType == "command.rejected"]

    def call(self, run: str = RUN, call: str = CALL) -> Any:
        from runfacts.processors.decider.state import RunState

        raw = self.decider.read_store("runs")[run.encode()]
        return RunState.model_validate_json(raw).toolCalls[call]

    def status(self, run: str = RUN) -> str:
        import json

        return json.loads(self.decider.read_store("runs")[run.encode()])["status"]

    # --- the harness side ---------------------------------------------------------------

    def at(self, cls: type[CommandBase], actor: Any = AGENT, **payload: Any) -> Any:
        return command(cls, actor, run=RUN, at=self.now(), **payload)

    def start_refund(self, arguments: dict[str, Any] | None = None, approve: bool = True) -> Loop:
        """Create the run, store the arguments, propose the refund and (by default) approve it."""
        arguments = REFUND_ARGS if arguments is None else arguments
        stored = self.args.put(arguments, ref=f"args/{CALL}")
        self.send(self.at(cmd.CreateRun, USER, goalRef="goal-1", goalSummary="refund order-001",
                          userId="customer-42", budget=BudgetAmounts(toolCalls=5, steps=50),
                          versions=CTX.current_versions),
                  self.at(cmd.ProposeToolCall, toolCallId=CALL, capabilityId="payments.refund",
                          argsHash=stored.hash, argsRef=stored.ref, target="order-001",
                          action="refund", risk="high", summary="Refund 42.00 EUR"))
        if approve:
            self.approve(stored.hash)
        return self

    def approval(self, digest: str | None = None) -> cmd.ResumeRun:
        return self.at(cmd.ResumeRun, SUPPORT, approvalId=f"approval-{CALL}", decision="approve",
                       argsHash=digest or args_hash(REFUND_ARGS))

    def approve(self, digest: str | None = None) -> Loop:
        return self.send(self.approval(digest))


def _crash(point: str, armed: str) -> None:
    if point == armed:
        raise SimulatedCrash(point)
