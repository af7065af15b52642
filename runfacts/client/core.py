"""The client's operations, written once for every client and both calling forms.

Each operation is a generator of *steps* (`Deliver` a command and get the decider's answer,
`Await` a check over the run's facts, `Blocking` I/O, `Pause`); a client runs it with
`drive` (the blocking methods) or `drive_async` (their awaitable twins, `<name>_async`). So
`Runfacts` (Kafka) and `runfacts.testing.TestClient` (the in-process stack) share every
operation and differ only in how they carry out a step (`_effect`, `_effect_async`).
"""

from __future__ import annotations

import asyncio
import uuid
from abc import ABC, abstractmethod
from collections.abc import Callable, Generator, Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple, Protocol, TypeVar

from runfacts.client import outcomes
from runfacts.client.approvals import Approval, UiSettings, approvals_of, resume_for, resume_payload
from runfacts.client.errors import BadArgument, ClientError, CommandRejected, RunNotFound, WaitTimeout
from runfacts.client.outcomes import Resolved
from runfacts.client.output import (
    AsyncOutputWriter,
    Chunk,
    OutputForbidden,
    OutputSink,
    OutputWriter,
    last_seq,
    may_write,
    once_each,
)
from runfacts.client.run import ProposedMemory, Run, ToolCall, budget_amounts, memory_scope
from runfacts.privacy.envelope import MARKERS, KeyView
from runfacts.processors.decider.state import TERMINAL, RunState
from runfacts.processors.policy.capabilities import CapabilityCatalog, CapabilityManifest, load_capabilities
from runfacts.processors.policy.display import render
from runfacts.processors.policy.retry import args_hash
from runfacts.projections import memory as memory_view
from runfacts.schemas import commands as cmd
from runfacts.schemas import events as ev
from runfacts.schemas.common import Actor, ArgDisplay, BudgetAmounts, CommandBase, EventBase, RunVersions
from runfacts.schemas.errors import ConfigError
from runfacts.schemas.models import new_command, payload_class
from runfacts.security.approvals import ApprovalRequest, sign_approval

if TYPE_CHECKING:
    from runfacts.client.agents import Agent, Handler
    from runfacts.client.follower import Journal

R = TypeVar("R")
Check = Callable[["Journal"], Resolved | None]
AGENT_SOURCE = "agent-harness"


class Answer(NamedTuple):
    """The decider's answer to one command: its events and the version it committed."""

    events: tuple[EventBase, ...]
    version: int | None


@dataclass(frozen=True)
class ClientSettings:
    """How the client identifies itself and how long it waits by default."""

    agent: str = "agent-harness"
    """The agent's subjectId on its commands (authSource agent-harness, role agent)."""
    timeout_s: float = 30.0
    """Default wait for a command's answer; result() and decision() wait forever unless told."""
    component: str = "client"
    ui: UiSettings = UiSettings()


# --- steps -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Deliver:
    """Send `command` and answer the decider's `Answer` (`run` None: send only, no answer awaited;
    `arguments`: a proposal's, written to the argument store first)."""

    run: Run | None
    command: CommandBase
    arguments: dict[str, Any] | None = None
    timeout: float | None = None


@dataclass(frozen=True)
class Await:
    """Wait until `check` decides on the run's facts; answers the value or raises its error."""

    run: Run
    check: Check
    what: str
    timeout: float | None
    tool_call_id: str | None = None


@dataclass(frozen=True)
class Blocking:
    """Call `call` (I/O: in a worker thread when awaited)."""

    call: Callable[[], Any]


@dataclass(frozen=True)
class Pause:
    seconds: float


Step = Deliver | Await | Blocking | Pause
Steps = Generator[Step, Any, R]


class ToolSource(Protocol):
    """What a `ToolRegistry` offers the client (the client does not import the tools room)."""

    def catalog(self) -> CapabilityCatalog: ...


Capabilities = ToolSource | CapabilityCatalog | str | Path | None


def manifests_of(capabilities: Capabilities) -> dict[str, CapabilityManifest]:
    """The manifests of a `ToolRegistry`, a `CapabilityCatalog` or a manifest path (None: none)."""
    if capabilities is None:
        return {}
    found: Any = capabilities.catalog() if hasattr(capabilities, "catalog") else capabilities
    if isinstance(found, str | Path):
        found = load_capabilities(Path(found))
    if not isinstance(found, CapabilityCatalog):
        raise ConfigError("capabilities", type(capabilities).__name__,
                          "expected a ToolRegistry, a CapabilityCatalog or a manifest path")
    return dict(found.capabilities)


def result_types_of(capabilities: Capabilities) -> dict[str, Callable[[Any], Any]]:
    """How to turn each tool's result value (JSON) into its declared return type: a
    `ToolRegistry`'s (`result_types()`); a manifest declares none (the value stays JSON)."""
    types = getattr(capabilities, "result_types", None)
    return {} if types is None else {cid: adapter.validate_python for cid, adapter in types().items()}


def argument_display(manifests: Mapping[str, CapabilityManifest], capability: str,
                     arguments: Mapping[str, Any]) -> ArgDisplay:
    """A proposal's argument display by its capability's schema (every field personal without one)."""
    manifest = manifests.get(capability)
    if manifest is None:
        return render(arguments, None)
    return render(arguments, manifest.schema_or_none(), manifest.rule_fields())


def _reviewer(reviewer: str | Actor, memory: ProposedMemory, auth_source: str) -> Actor:
    return reviewer if isinstance(reviewer, Actor) else Actor(
        subjectId=reviewer, roles=("memory_reviewer",), tenant=memory.tenant, authSource=auth_source)


class ClientCore(ABC):
    """Every operation of the client, over the steps a concrete client carries out."""

    settings: ClientSettings
    versions: RunVersions
    keys: Callable[[], KeyView]
    """The key view that reveals sealed results and failure details."""
    actor: Actor
    capabilities: dict[str, CapabilityManifest]
    """The manifests proposals are displayed with (`learn` adds a registry's)."""
    result_types: dict[str, Callable[[Any], Any]]
    """Per capability, how its result value becomes the tool's declared return type."""

    # --- what a concrete client provides ----------------------------------------------------

    @abstractmethod
    def _effect(self, step: Step) -> Any:
        """Carry out one step, blocking."""

    @abstractmethod
    async def _effect_async(self, step: Step) -> Any:
        """Carry out one step, awaitable."""

    @abstractmethod
    def _now(self) -> datetime: ...

    @abstractmethod
    def _journal(self, run_id: str, backfill: bool) -> Journal:
        """The run's journal (watched; with `backfill` holding its earlier facts)."""

    @abstractmethod
    def _watched(self, run_id: str) -> bool:
        """The client follows the run already (its journal holds what arrived since)."""

    @abstractmethod
    def _unwatch(self, run_id: str) -> None:
        """Let the journal of a run watched only for one command go."""

    @abstractmethod
    def state(self, run_id: str) -> RunState:
        """The run's latest state (RunNotFound without one)."""

    @abstractmethod
    def _states(self) -> Iterable[RunState]:
        """Every run's latest state."""

    @abstractmethod
    def _view_once(self, run_id: str, role: str) -> dict[str, Any] | None: ...

    @abstractmethod
    def _memories(self) -> Iterable[memory_view.MemoryEntry]: ...

    @abstractmethod
    def output_producer(self) -> OutputSink:
        """Where output chunks go (runfacts.client.output)."""

    @abstractmethod
    def _output_chunks(self, run_id: str) -> list[Chunk]:
        """The run's output chunks as stored (log order)."""

    def _revealed(self, found: list[Approval]) -> list[Approval]:
        return found

    # --- driving ------------------------------------------------------------------------------

    def drive(self, steps: Steps[R]) -> R:
        """Run an operation, blocking."""
        value: Any = None
        error: Exception | None = None
        while True:
            try:
                step = steps.send(value) if error is None else steps.throw(error)
            except StopIteration as stop:
                return stop.value  # type: ignore[no-any-return]
            try:
                value, error = self._effect(step), None
            except Exception as exc:  # noqa: BLE001 - raised inside the operation, where it may be handled
                value, error = None, exc

    async def drive_async(self, steps: Steps[R]) -> R:
        """Run an operation, awaitable."""
        value: Any = None
        error: Exception | None = None
        while True:
            try:
                step = steps.send(value) if error is None else steps.throw(error)
            except StopIteration as stop:
                return stop.value  # type: ignore[no-any-return]
            try:
                value, error = await self._effect_async(step), None
            except Exception as exc:  # noqa: BLE001 - raised inside the operation, where it may be handled
                value, error = None, exc

    # --- agents ---------------------------------------------------------------------------------

    def agent(self, name: str) -> Callable[[Handler], Agent]:
        """Register `handler(run)` as the agent `name` (runfacts.client.agents): `@rf.agent("refunds")`
        gives an `Agent` to `submit` runs to, to `serve` in every agent process (Kafka), and to
        `recover` now (re-enter its open runs in this thread, e.g. in a test after a crash)."""
        from runfacts.client.agents import Agent  # agents' shell builds on this core

        def register(handler: Handler) -> Agent:
            return Agent(self, name, handler)
        return register

    # --- partial output (runfacts.client.output) -------------------------------------------------

    def output(self, run_id: str, stream: str = "answer", *, resume: bool = False,
               actor: Actor | None = None) -> OutputWriter:
        """A writer of the run's partial output stream `stream` (tokens, progress): `write(text)`
        per chunk, `close()` (or the end of a `with` block) marks it done. Not the run's facts:
        readers (`read_output`, the gateway's `GET /runs/{id}/output`) skip a chunk whose seq they
        handed already, so a retry after a crash may write from the start again (the default) or,
        with `resume`, continue after the last chunk on the topic (`writer.written`). Only the
        run's agent (`actor`, default this client's) may write it: `OutputForbidden` otherwise."""
        actor = actor or self.actor
        why = may_write(actor, self.state(run_id).tenant)
        if why is not None:
            raise OutputForbidden(run_id, actor, why)
        written = last_seq(self.read_output(run_id), stream) if resume else -1
        return OutputWriter(self.output_producer(), run_id, stream, actor, written + 1, written)

    async def output_async(self, run_id: str, stream: str = "answer", *, resume: bool = False,
                           actor: Actor | None = None) -> AsyncOutputWriter:
        """`output`, awaitable: `await out.write(text)`, `await out.close()`, `async with`."""
        writer = await asyncio.to_thread(self.output, run_id, stream, resume=resume, actor=actor)
        return AsyncOutputWriter(writer)

    def read_output(self, run_id: str) -> list[Chunk]:
        """The run's output chunks now, each (stream, seq) once, in order."""
        return once_each(self._output_chunks(run_id))

    async def read_output_async(self, run_id: str) -> list[Chunk]:
        return await asyncio.to_thread(self.read_output, run_id)

    # --- tools ----------------------------------------------------------------------------------

    def learn(self, capabilities: Capabilities) -> None:
        """Display proposals with these manifests (a `ToolRegistry`, a `CapabilityCatalog`, a path);
        a registry also gives each tool's declared return type to `call.result()`."""
        self.capabilities.update(manifests_of(capabilities))
        self.result_types.update(result_types_of(capabilities))

    def display(self, capability: str, arguments: Mapping[str, Any]) -> ArgDisplay:
        """The argument display of a proposal (every field personal for a tool without a known schema)."""
        return argument_display(self.capabilities, capability, arguments)

    def typed(self, capability: str, value: Any) -> Any:
        """A call's result value as its tool's declared return type, when the client learned the
        tool's registry; else the JSON value (a dict). None and privacy markers stay as they are."""
        convert = self.result_types.get(capability)
        if convert is None or value is None or (isinstance(value, str) and value in MARKERS):
            return value
        return convert(value)

    # --- commands -------------------------------------------------------------------------------

    def _new(self, run_id: str, cls: type[CommandBase], payload: dict[str, Any], actor: Actor | None = None,
             command_id: str | None = None) -> Any:
        try:
            return new_command(cls, commandId=command_id or f"{run_id}:{uuid.uuid4().hex[:20]}", runId=run_id,
                               actor=actor or self.actor, issuedAt=self._now(), correlationId=run_id,
                               payload=payload_class(cls)(**payload))
        except ValueError as exc:
            raise BadArgument(run_id, cls.__name__, payload, f"does not validate: {exc}") from exc

    def sends(self, run: Run, cls: type[CommandBase], payload: dict[str, Any], actor: Actor | None = None,
              timeout: float | None = None) -> Steps[Answer]:
        """One command for `run` and the decider's answer. A run an agent owns (`run.replay`, see
        `runfacts.client.agents`) sends it as its next step, with a deterministic command id: a
        step its facts already record returns the recorded answer instead of being sent again."""
        return (yield from self._step(run, cls, payload, actor, timeout, None))

    def _step(self, run: Run, cls: type[CommandBase], payload: dict[str, Any], actor: Actor | None,
              timeout: float | None, arguments: dict[str, Any] | None) -> Steps[Answer]:
        if run.replay is None:
            answer: Answer = yield Deliver(run, self._new(run.id, cls, payload, actor), arguments, timeout)
            return answer
        command_id, recorded = run.replay.next(run, cls, payload)
        if recorded:
            return Answer(command_answer(run.id, recorded, cls.__name__),
                          outcomes.version_after(run.journal.entries, recorded[-1].offset))
        command = self._new(run.id, cls, payload, actor or run.replay.actor, command_id)
        answer = yield Deliver(run, command, arguments, timeout)
        return answer

    def command(self, run: Run, cls: type[CommandBase], payload: dict[str, Any], actor: Actor | None = None,
                timeout: float | None = None) -> Answer:
        """Send one command for `run` and wait for the decider's answer."""
        return self.drive(self.sends(run, cls, payload, actor, timeout))

    def proposes(self, run: Run, capability: str, arguments: dict[str, Any], call_id: str,
                 fields: dict[str, Any], actor: Actor | None = None) -> Steps[ToolCall[Any]]:
        """Store the arguments (content-addressed `args-<sha256>`), send the proposal, its call."""
        digest = args_hash(arguments)
        payload = {**fields, "toolCallId": call_id, "argsRef": f"args-{digest}", "argsHash": digest,
                   "display": self.display(capability, arguments)}
        try:
            answer = yield from self._step(run, cmd.ProposeToolCall, payload, actor, None, arguments)
        except CommandRejected as exc:
            if exc.reason != "already_proposed":
                raise
            # proposed before (a restart, the model asking again): the same call, as its latest
            # re-authorization (the journal holds the facts up to the rejection)
            return ToolCall(run, outcomes.latest_link(run.journal.entries, call_id), capability, digest, None)
        proposed = next((e.payload.toolCallId for e in answer.events if isinstance(e, ev.ToolCallProposed)), call_id)
        return ToolCall(run, proposed, capability, digest, answer.version)  # proposed anew after an expiry: <id>-r<n>

    def waits(self, run: Run, check: Check, what: str, timeout: float | None,
              tool_call_id: str | None = None) -> Steps[Any]:
        """`check` over the run's facts, once it decides."""
        return (yield Await(run, check, what, timeout, tool_call_id))

    # --- runs -----------------------------------------------------------------------------------

    def _start_run(self, goal: str, summary: str, user_id: str, tenant: str | None,
                   budget: BudgetAmounts | Mapping[str, int] | None, run_id: str | None,
                   actor: Actor | None) -> Steps[Run]:
        run_id = run_id or f"run-{uuid.uuid4().hex}"
        for name, value in (("run_id", run_id), ("goal", goal), ("user_id", user_id)):
            if not isinstance(value, str) or not value.strip():
                raise BadArgument(run_id if name != "run_id" else "?", name, value, "must be a non-empty string")
        amounts = budget_amounts(run_id, "budget", budget)
        fresh = not self._watched(run_id)
        run = Run(self, run_id, self._journal(run_id, False))
        if fresh:  # watched before it exists: complete if CreateRun is accepted
            run.journal.complete = True
        payload = {"goalRef": goal, "goalSummary": summary, "userId": user_id, "tenant": tenant,
                   "budget": amounts, "versions": self.versions}
        try:
            run.version = (yield from self.sends(run, cmd.CreateRun, payload, actor)).version
        except CommandRejected as exc:
            if fresh:
                run.journal.complete = False  # it existed before: its earlier facts are not here
            if exc.reason != "run_exists":
                if fresh:
                    self._unwatch(run_id)
                raise
            found: Run = yield Blocking(partial(self.run, run_id))
            return found
        return run

    def start_run(self, *, goal: str, summary: str, user_id: str, tenant: str | None = None,
                  budget: BudgetAmounts | Mapping[str, int] | None = None, run_id: str | None = None,
                  actor: Actor | None = None) -> Run:
        """Create a run (idempotent on run_id: the same run_id again returns the same run);
        `actor`: who creates it, when not this client's agent."""
        return self.drive(self._start_run(goal, summary, user_id, tenant, budget, run_id, actor))

    async def start_run_async(self, *, goal: str, summary: str, user_id: str, tenant: str | None = None,
                              budget: BudgetAmounts | Mapping[str, int] | None = None, run_id: str | None = None,
                              actor: Actor | None = None) -> Run:
        """`start_run`, awaitable."""
        return await self.drive_async(self._start_run(goal, summary, user_id, tenant, budget, run_id, actor))

    def _start_child(self, parent: Run, goal: str, summary: str, budget: BudgetAmounts | Mapping[str, int],
                     run_id: str | None, timeout: float | None) -> Steps[Run]:
        run_id = run_id or f"run-{uuid.uuid4().hex}"
        for name, value in (("run_id", run_id), ("goal", goal), ("summary", summary)):
            if not isinstance(value, str) or not value.strip():
                raise BadArgument(parent.id, name, value, "must be a non-empty string")
        amounts = budget_amounts(run_id, "budget", budget)
        fresh = not self._watched(run_id)
        child = Run(self, run_id, self._journal(run_id, False))
        if fresh:  # watched before it exists: every fact of it is here
            child.journal.complete = True
        answer = yield from self.sends(parent, cmd.StartChildRun, {"childRunId": run_id, "goalRef": goal,
                                                                   "goalSummary": summary, "budget": amounts})
        parent.version = answer.version if answer.version is not None else parent.version
        requested = next((e for e in answer.events if isinstance(e, ev.ChildRunRequested)), None)
        if requested is None:  # queued in an outbox transaction: the child comes later
            return child
        child.version = yield from self.waits(child, child_created(run_id, requested), f"child {run_id} created",
                                              self.settings.timeout_s if timeout is None else timeout)
        return child

    def start_child(self, parent: Run, *, goal: str, summary: str, budget: BudgetAmounts | Mapping[str, int],
                    run_id: str | None = None, timeout: float | None = None) -> Run:
        """Start a child run of `parent` (a parallel worker) with `budget` reserved from the parent's
        remaining budget; returns the child once its decider created it (any partition). Refused
        (`CommandRejected`): `budget_exceeded`, `budget_unbounded` (a dimension the parent limits
        needs a limit), `child_exists`, `run_not_active`; the child's id taken: `child_refused`.
        Protocol: docs/decisions/0012-child-runs.md."""
        return self.drive(self._start_child(parent, goal, summary, budget, run_id, timeout))

    async def start_child_async(self, parent: Run, *, goal: str, summary: str,
                                budget: BudgetAmounts | Mapping[str, int], run_id: str | None = None,
                                timeout: float | None = None) -> Run:
        """`start_child`, awaitable."""
        return await self.drive_async(self._start_child(parent, goal, summary, budget, run_id, timeout))

    def child_report(self, parent: Run, child_id: str, timeout: float | None = None) -> ev.ChildRunReportedPayload:
        """Wait until the parent has folded its child's end (`status` completed | failed |
        cancelled | refused, `used`, `released`); its evidence merge follows in the same answer."""
        found: ev.ChildRunReportedPayload = self.drive(
            self.waits(parent, child_ended(child_id), f"end of child {child_id}", timeout))
        return found

    async def child_report_async(self, parent: Run, child_id: str,
                                 timeout: float | None = None) -> ev.ChildRunReportedPayload:
        """`child_report`, awaitable."""
        found: ev.ChildRunReportedPayload = await self.drive_async(
            self.waits(parent, child_ended(child_id), f"end of child {child_id}", timeout))
        return found

    def run(self, run_id: str) -> Run:
        """Re-attach to a run by id (its facts are read back once; RunNotFound if it has none)."""
        journal = self._journal(run_id, True)
        if not journal.entries:
            self._unwatch(run_id)
            raise RunNotFound(run_id)
        return Run(self, run_id, journal, outcomes.version_after(journal.entries, journal.entries[-1].offset))

    async def run_async(self, run_id: str) -> Run:
        """`run`, awaitable."""
        found: Run = await self._effect_async(Blocking(partial(self.run, run_id)))
        return found

    def open_runs(self, *, user_id: str | None = None, tenant: str | None = None,
                  agent: str | None = None) -> list[Run]:
        """Runs not ended yet (from the run-state topic), created by this agent unless `agent`
        names another; each re-attached with its facts, its `calls()` the ones still pending."""
        who = agent or self.settings.agent
        wanted = [s for s in self._states()
                  if s.status not in TERMINAL and not s.archived and s.createdBy.subjectId == who
                  and (user_id is None or s.userId == user_id) and (tenant is None or s.tenant == tenant)]
        journals = self._journals(s.runId for s in wanted)
        return [Run(self, s.runId, j, s.version) for s, j in zip(wanted, journals, strict=True)]

    async def open_runs_async(self, *, user_id: str | None = None, tenant: str | None = None,
                              agent: str | None = None) -> list[Run]:
        """`open_runs`, awaitable."""
        found: list[Run] = await self._effect_async(Blocking(partial(self.open_runs, user_id=user_id,
                                                                     tenant=tenant, agent=agent)))
        return found

    def _journals(self, run_ids: Iterable[str]) -> list[Journal]:
        return [self._journal(run_id, True) for run_id in run_ids]

    def goal_of(self, run: Run) -> str:
        """The goal the run was created with (RunNotFound before its `run.created`)."""
        created = next((e.event for e in run.journal.entries if isinstance(e.event, ev.RunCreated)), None)
        if created is None:
            raise RunNotFound(run.id)
        return created.payload.goalRef

    def pending_calls(self, run: Run) -> list[ToolCall[Any]]:
        """The calls the run's state holds, not closed, oldest first."""
        state = self.state(run.id)
        held = sorted((c for c in state.toolCalls.values() if c.closedReason is None), key=lambda c: c.proposedAt)
        return [ToolCall(run, c.toolCallId, c.capabilityId, c.argsHash, None) for c in held]

    # --- views ----------------------------------------------------------------------------------

    def _view(self, run_id: str, role: str, min_version: int | None, timeout: float | None) -> Steps[dict[str, Any]]:
        if role not in ("user", "operator", "auditor"):
            raise BadArgument(run_id, "role", role, "must be user, operator or auditor")
        limit = self.settings.timeout_s if timeout is None else timeout
        deadline = self._now() + timedelta(seconds=limit)
        while True:
            found: dict[str, Any] | None = yield Blocking(partial(self._view_once, run_id, role))
            if found is not None and (min_version is None or found["version"] >= min_version):
                return found
            if self._now() >= deadline:
                seen = None if found is None else found["version"]
                raise WaitTimeout(run_id, f"{role} view at version >= {min_version} (latest: {seen})", limit)
            yield Pause(0.05)

    def view(self, run_id: str, role: str = "user", min_version: int | None = None,
             timeout: float | None = None) -> dict[str, Any]:
        """The run's `role` view once it reflects `min_version` (user: from the view topic)."""
        return self.drive(self._view(run_id, role, min_version, timeout))

    async def view_async(self, run_id: str, role: str = "user", min_version: int | None = None,
                         timeout: float | None = None) -> dict[str, Any]:
        """`view`, awaitable."""
        return await self.drive_async(self._view(run_id, role, min_version, timeout))

    # --- for UIs --------------------------------------------------------------------------------

    def approvals(self, *, role: str | None = None, tenant: str | None = None,
                  personal: bool = False) -> list[Approval]:
        """Pending approvals (open, not expired), oldest first, for `role` in `tenant`, each with its
        argument display (`display_lines(a.display)`); personal values masked unless `personal`
        (a UI whose approver may see the tool's personal fields)."""
        found = approvals_of(self._states(), role, tenant, self._now(), personal)
        return self._revealed(found) if personal else found

    async def approvals_async(self, *, role: str | None = None, tenant: str | None = None,
                              personal: bool = False) -> list[Approval]:
        """`approvals`, awaitable."""
        found: list[Approval] = await self._effect_async(Blocking(partial(self.approvals, role=role, tenant=tenant,
                                                                          personal=personal)))
        return found

    def _decide(self, approval: Approval, decision: str, approver: str | Actor, timeout: float | None,
                wait: bool) -> Steps[int | None]:
        actor, request = resume_for(approval, decision, approver, self.settings.ui.auth_source)
        token = sign_approval(request, int(self._now().timestamp() * 1000), environ=self.settings.ui.signing_env)
        command = self._new(approval.run_id, cmd.ResumeRun, resume_payload(request, token), actor)
        if not wait:
            yield Deliver(None, command)
            return None
        fresh = not self._watched(approval.run_id)
        try:
            answer: Answer = yield Deliver(Run(self, approval.run_id, self._journal(approval.run_id, False)),
                                           command, None, timeout)
        finally:
            if fresh:
                self._unwatch(approval.run_id)
        return answer.version

    def decide(self, approval: Approval, decision: str, *, approver: str | Actor,
               timeout: float | None = None, wait: bool = True) -> int | None:
        """Approve or reject: bound to the approval's argsHash, signed with this service's key
        (RUNFACTS_APPROVAL_KEYS[_FILE]), and the decider's answer awaited (`wait=False`: sent
        only, None returned). Returns the version the decider committed."""
        return self.drive(self._decide(approval, decision, approver, timeout, wait))

    async def decide_async(self, approval: Approval, decision: str, *, approver: str | Actor,
                           timeout: float | None = None, wait: bool = True) -> int | None:
        """`decide`, awaitable."""
        return await self.drive_async(self._decide(approval, decision, approver, timeout, wait))

    def memory(self, scope: tuple[str, str]) -> list[memory_view.MemoryEntry]:
        """What agents may rely on in `scope` (`(tenant, "capability:<id>" | "topic:<name>")`):
        confirmed, unexpired, unrevoked memories with provenance (run, evidence, reviewer), in
        key order (run, memoryId), read from the compacted memory topic `<prefix>.memory` (written by `runfacts
        worker memory`). An entry past its expiry is not answered even before the decider's
        timer has written `memory.expired` and the projector its tombstone."""
        tenant, kind, name = memory_scope("<memory>", scope)
        found = {memory_view.memory_key(e): e for e in self._memories()}
        return memory_view.entries(found, (tenant, kind, name), self._now())

    async def memory_async(self, scope: tuple[str, str]) -> list[memory_view.MemoryEntry]:
        """`memory`, awaitable."""
        found: list[memory_view.MemoryEntry] = await self._effect_async(Blocking(partial(self.memory, scope)))
        return found

    def _review_memory(self, run_id: str, memory: ProposedMemory, decision: str, reviewer: str | Actor,
                       timeout: float | None) -> Steps[int | None]:
        actor = _reviewer(reviewer, memory, self.settings.ui.auth_source)
        request = ApprovalRequest(run_id, memory.id, memory.candidate_hash, decision, actor.subjectId)
        token = sign_approval(request, int(self._now().timestamp() * 1000), environ=self.settings.ui.signing_env)
        payload = {"memoryId": memory.id, "decision": decision, "candidateHash": memory.candidate_hash,
                   "reviewToken": token}
        run = Run(self, run_id, self._journal(run_id, False))
        return (yield from self.sends(run, cmd.ReviewMemory, payload, actor, timeout)).version

    def review_memory(self, run_id: str, memory: ProposedMemory, decision: str, *, reviewer: str | Actor,
                      timeout: float | None = None) -> int | None:
        """Confirm ("approve") or reject a memory candidate as `reviewer` (role memory_reviewer,
        through the UI's auth source), bound to its hash and signed like an approval (the same
        keys). Returns the version; CommandRejected (`evidence_not_in_run`, `memory_expired`,
        `memory_already_decided`, ...) when the decider refuses the promotion."""
        return self.drive(self._review_memory(run_id, memory, decision, reviewer, timeout))

    async def review_memory_async(self, run_id: str, memory: ProposedMemory, decision: str, *,
                                  reviewer: str | Actor, timeout: float | None = None) -> int | None:
        """`review_memory`, awaitable."""
        return await self.drive_async(self._review_memory(run_id, memory, decision, reviewer, timeout))

    def _revoke_memory(self, run_id: str, memory: ProposedMemory, reviewer: str | Actor, reason: str,
                       timeout: float | None) -> Steps[int | None]:
        actor = _reviewer(reviewer, memory, self.settings.ui.auth_source)
        run = Run(self, run_id, self._journal(run_id, False))
        return (yield from self.sends(run, cmd.RevokeMemory, {"memoryId": memory.id, "reason": reason}, actor,
                                      timeout)).version

    def revoke_memory(self, run_id: str, memory: ProposedMemory, *, reviewer: str | Actor, reason: str = "",
                      timeout: float | None = None) -> int | None:
        """Withdraw a memory (or a candidate) as `reviewer` (a memory_reviewer of its tenant):
        `memory.revoke`; from then on `memory(scope)` no longer answers it. Returns the version."""
        return self.drive(self._revoke_memory(run_id, memory, reviewer, reason, timeout))

    async def revoke_memory_async(self, run_id: str, memory: ProposedMemory, *, reviewer: str | Actor,
                                  reason: str = "", timeout: float | None = None) -> int | None:
        """`revoke_memory`, awaitable."""
        return await self.drive_async(self._revoke_memory(run_id, memory, reviewer, reason, timeout))


def child_created(run_id: str, requested: ev.ChildRunRequested) -> Check:
    """A check on a child's journal: created (its version), or its creation refused (`child_refused`)."""
    create_id = f"xrun:{requested.eventId}"  # children.outbox: the id of the run.create_child it caused

    def created(j: Journal) -> Resolved | None:
        for entry in j.entries:
            if entry.event_type == "run.parent_linked":
                return Resolved(outcomes.version_after(j.entries, entry.offset))
            event = entry.event
            if isinstance(event, ev.CommandRejected) and event.payload.commandId == create_id:
                p = event.payload
                return Resolved(error=CommandRejected(run_id, p.commandType, "child_refused",
                                                      f"{p.reasonCode}: {p.detail}"))
        return None

    return created


def child_ended(child_id: str) -> Check:
    """A check on a parent's journal: the `child.reported` of the child's end."""
    def check(j: Journal) -> Resolved | None:
        for entry in j.entries:
            event = entry.event
            if isinstance(event, ev.ChildRunReported) and event.payload.childRunId == child_id \
                    and event.payload.status != "needs_review":
                return Resolved(event.payload)
        return None

    return check


def command_answer(run_id: str, found: list[outcomes.Entry], command: str) -> tuple[EventBase, ...]:
    """The events of a command's answer; its typed error raised (a rejection, a review)."""
    if not found:
        raise ClientError(run_id, f"the decider did not answer {command}")
    events = tuple(e.event for e in found)
    error = outcomes.command_error(run_id, events)
    if error is not None:
        raise error
    return events


__all__ = ["AGENT_SOURCE", "Answer", "Await", "Blocking", "Capabilities", "ClientCore", "ClientSettings", "Deliver",
           "Pause", "Step", "Steps", "ToolSource", "argument_display", "manifests_of", "result_types_of"]
