"""`TestStack`: the real decider, dispatcher and memory projector in one process, no broker (shell).

Each processor is the packaged application (`DeciderShell`, `DispatcherShell` serving your
`ToolRegistry`, `MemoryProjectorShell`) run by the engine's broker-free driver
(`runfacts.processors.engine.TestDriver`: the same Task, stores, timers and commit steps, an
in-memory log in place of Kafka). The stack forwards records between them as the topics
would: commands -> decider -> events -> dispatcher (and memory projector) -> commands ...,
until nothing moves (`settle`). The clock is the stack's: it moves only when told
(`advance`) or when a wait skips time (`TestClient`), and every due timer fires at its time.

Faults: `lose_response(capability)` (the tool runs, its answer is lost: the dispatcher reports
`result_unknown` and reconciles through the tool's lookup), `crash_at(point)` (the dispatcher
dies at a named crash point of `runfacts.crashpoints`: nothing of its open transaction is
committed, a new incarnation restores from the changelog and carries on). An approval
expires when the clock passes its TTL; a rejection is `rf.decide(approval, "reject", ...)`.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Mapping
from datetime import UTC, datetime, timedelta
from functools import cache
from pathlib import Path
from typing import Any

from runfacts.client.approvals import Approval, approvals_of
from runfacts.client.follower import Journal
from runfacts.client.outcomes import Entry
from runfacts.processors.decider.app import DeciderShell
from runfacts.processors.decider.context import DEFAULT_VERSIONS, DecideContext
from runfacts.processors.decider.security import policy_checks
from runfacts.processors.decider.state import RunState
from runfacts.processors.decider.state_json import load_state
from runfacts.processors.dispatcher.adapters import ToolRequest
from runfacts.processors.dispatcher.app import DispatcherSettings, DispatcherShell
from runfacts.processors.dispatcher.core import PollPolicy
from runfacts.processors.engine.testdriver import OutputRecord, TestDriver
from runfacts.processors.policy.access import load_policy
from runfacts.processors.policy.keyring import ENV_KEYS, load_keyring, new_secret
from runfacts.projections import memory as memory_view
from runfacts.projections import user_view
from runfacts.projections.eventlog import EventReader
from runfacts.projections.projector.memory import MemoryProjectorShell
from runfacts.schemas import codec
from runfacts.schemas.common import CommandBase, EventBase
from runfacts.schemas.errors import ConfigError
from runfacts.testing.client import TestClient
from runfacts.testing.parts import Faults, InlineRuntime, MemoryArgs, SimulatedCrash, TestedTool
from runfacts.tools.loader import load_registry
from runfacts.tools.registry import ToolRegistry
from runfacts.topics import TopicNames

CRASH_POINTS = ("dispatcher.after_call_before_record", "dispatcher.after_record_before_commit")
"""The named crash points (runfacts.crashpoints) the test stack can arm: the dispatcher's."""
MAX_STEPS = 100_000


@cache
def memory_reader() -> EventReader:
    """The memory projector's event reader, compiled once per process (not once per stack)."""
    return EventReader(memory_view.READS)


class TestStack:
    """The in-process stack (see the module docstring); `client()` is the agent's `Runfacts`."""

    __test__ = False  # not a pytest class

    def __init__(self, registry: ToolRegistry | str, *, prefix: str = "test", start: datetime | None = None,
                 options: Mapping[str, str] | None = None, policy: str | Path | None = None,
                 time_skipping: bool = True) -> None:
        """`registry`: your tools (a `ToolRegistry` or "module:attribute"); `start`: the clock's
        start (default: now); `options`: the adapters' serve options (e.g. `provider_url`);
        `policy`: an access policy TOML (default the packaged one); `time_skipping`: a wait
        with nothing left to do moves the clock to the next timer within its timeout."""
        self.registry = load_registry(registry) if isinstance(registry, str) else registry
        self.names = TopicNames(prefix)
        self.time_skipping = time_skipping
        moment = start or datetime.now(UTC)
        if moment.tzinfo is None:
            raise ConfigError("start", str(moment), "give an aware datetime, e.g. datetime(2026, 1, 1, tzinfo=UTC)")
        self.now_ms = int(moment.timestamp() * 1000)
        self.catalog = self.registry.catalog()
        self.signing_env = {ENV_KEYS: json.dumps({"current": "test-1", "keys": {"test-1": new_secret()}})}
        checks = policy_checks(load_policy(Path(policy) if policy else None, catalog=self.catalog),
                               load_keyring(environ=self.signing_env))
        self.context = DecideContext(current_versions=DEFAULT_VERSIONS, **checks)
        self.decider = TestDriver(DeciderShell(self.names, self.context,
                                               views=(user_view.publisher(self.names.user_view),)).application(),
                                  start_ms=self.now_ms)
        self.memory_projector = TestDriver(MemoryProjectorShell(self.names, reader=memory_reader()).application(),
                                           start_ms=self.now_ms)
        self.args = MemoryArgs()
        self.faults = Faults()
        self.options = dict(options or {})
        self.runtime = InlineRuntime()
        self.executed: dict[str, list[ToolRequest]] = {cid: [] for cid in self.registry.capability_ids}
        self.looked_up: dict[str, list[str]] = {cid: [] for cid in self.registry.capability_ids}
        self.incarnation = 0
        self.dispatcher = self._new_dispatcher()
        self._seen: dict[tuple[str, int], int] = {}
        self._journals: dict[str, Journal] = {}
        self._states: dict[str, RunState] = {}
        self._views: dict[str, bytes] = {}
        self._memories: dict[str, bytes] = {}
        self._clients: dict[str, TestClient] = {}
        self._approval_hooks: list[Callable[[Approval], object]] = []
        self._handed: set[str] = set()

    # --- the agent's side --------------------------------------------------------------------

    def client(self, agent: str = "agent-harness") -> TestClient:
        """The `Runfacts`-compatible client of this stack (one per agent name)."""
        if agent not in self._clients:
            self._clients[agent] = TestClient(self, agent)
        return self._clients[agent]

    def on_approval(self, hook: Callable[[Approval], object]) -> TestStack:
        """Call `hook(approval)` once for each approval that is pending while a wait has nothing
        else to do (before the clock skips): the person who approves while the agent waits, e.g.
        `stack.on_approval(lambda a: rf.decide(a, "approve", approver="alice"))`."""
        self._approval_hooks.append(hook)
        return self

    def hand_out_approvals(self) -> bool:
        """Give every pending approval not handed out yet to the hooks; True if any was."""
        if not self._approval_hooks:
            return False
        fresh = [a for a in approvals_of(self._states.values(), None, None, self.now())
                 if a.approval_id not in self._handed]
        for approval in fresh:
            self._handed.add(approval.approval_id)
            for hook in self._approval_hooks:
                hook(approval)
            self.settle()
        return bool(fresh)

    def __enter__(self) -> TestStack:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    def close(self) -> None:
        self.runtime.close()

    # --- the clock -------------------------------------------------------------------------

    def now(self) -> datetime:
        return datetime.fromtimestamp(self.now_ms / 1000, tz=UTC)

    def advance(self, delta: timedelta | float = 0, *, ms: int | None = None) -> TestStack:
        """Move the clock by `delta` (a timedelta or seconds; or `ms`), firing every timer that
        falls due on the way, at its due time and in order, and settling after each."""
        step = ms if ms is not None else int((delta.total_seconds() if isinstance(delta, timedelta) else delta) * 1000)
        if step < 0:
            raise ConfigError("advance", str(step), "the clock only moves forward")
        self.advance_to(self.now_ms + step)
        return self

    def advance_to(self, target_ms: int) -> None:
        for _ in range(MAX_STEPS):
            due = self.next_due_ms()
            if due is None or due > target_ms:
                break
            self._fire(max(due, self.now_ms))
        else:
            raise RuntimeError(f"timers kept falling due before {target_ms}: a timer that reschedules itself at once?")
        self._fire(max(target_ms, self.now_ms))

    def next_due_ms(self) -> int | None:
        """When the next timer of any processor is due (None: no timer is set)."""
        dues = [due for driver in self._drivers() for task in driver.tasks.values()
                if (due := task.timers.next_due()) is not None]
        return min(dues) if dues else None

    def _drivers(self) -> tuple[TestDriver, ...]:
        return self.decider, self.dispatcher, self.memory_projector

    def _fire(self, at_ms: int) -> None:
        self.now_ms = at_ms
        for driver in (self.decider, self.memory_projector):
            driver.now_ms = at_ms
            driver.advance(0)
        self._dispatch(lambda: self.dispatcher.advance(0))
        self.settle()

    # --- faults ----------------------------------------------------------------------------

    def lose_response(self, capability: str, times: int = 1) -> TestStack:
        """The next `times` calls of `capability` run, and their responses are lost: the
        dispatcher reports `result_unknown` and reconciles through the tool's lookup."""
        if capability not in self.executed:
            raise ConfigError("lose_response", capability, f"not a tool of this stack ({', '.join(self.executed)})")
        self.faults.lose[capability] = self.faults.lose.get(capability, 0) + times
        return self

    def crash_at(self, point: str) -> TestStack:
        """The dispatcher dies the next time it reaches `point` (one of CRASH_POINTS) and a new
        incarnation takes over from what was committed."""
        if point not in CRASH_POINTS:
            raise ConfigError("crash_at", point,
                              f"the test stack can crash the dispatcher at {', '.join(CRASH_POINTS)}")
        self.faults.crash_at = point
        return self

    def _crash_hook(self, point: str) -> None:
        if point == self.faults.crash_at:
            self.faults.crash_at = ""
            raise SimulatedCrash(point)

    def _new_dispatcher(self) -> TestDriver:
        self.incarnation += 1

        def fresh(cid: str) -> Callable[[], Any]:
            return lambda: self.registry.adapters(only=[cid], options=self.options, runtime=self.runtime)[cid]

        served = self.registry.adapters(options=self.options, runtime=self.runtime)
        adapters = {cid: TestedTool(cid, adapter, fresh(cid), self.faults, self.executed[cid], self.looked_up[cid])
                    for cid, adapter in served.items()}
        settings = DispatcherSettings(names=self.names, catalog=self.catalog, incarnation=self.incarnation,
                                      instance=f"dispatcher-{self.incarnation}", poll=PollPolicy(first_ms=0, max_ms=0))
        shell = DispatcherShell(settings, adapters, self.args, clock=lambda: self.now_ms / 1000,
                                crash=self._crash_hook, pool=None)
        return TestDriver(shell.application(), start_ms=self.now_ms)

    def _dispatch(self, step: Callable[[], object]) -> bool:
        """Run a dispatcher step; on a simulated crash, restart it (False: the step did not happen)."""
        offsets = dict(self.dispatcher._input_offsets)
        try:
            step()
            return True
        except SimulatedCrash:
            old = self.dispatcher
            self.dispatcher = new = self._new_dispatcher()
            new.log, new.backends, new._input_offsets = old.log, old.backends, offsets
            new.restart()
            return False

    @property
    def restarts(self) -> int:
        """How many times the dispatcher was restarted after a crash."""
        return self.incarnation - 1

    # --- moving records ----------------------------------------------------------------------

    def send(self, command: CommandBase) -> None:
        """One command to the decider (as the client's producer would), then settle."""
        self.decider.now_ms = self.now_ms
        self.decider.pipe(self.names.commands, codec.encode(command), command.runId.encode())
        self.settle()

    def _new(self, driver: TestDriver, topic: str) -> Iterator[OutputRecord]:
        for (name, partition), log in list(driver.log.logs.items()):
            if name != topic:
                continue
            seen = self._seen.get((name, partition), 0)
            while seen < len(log):
                record = log[seen]
                seen += 1
                self._seen[(name, partition)] = seen  # before the yield: a crashed step takes it back
                yield record

    def settle(self) -> TestStack:
        """Forward records between the processors until nothing moves."""
        for _ in range(MAX_STEPS):
            if not self._step():
                return self
        raise RuntimeError("the decider and the dispatcher did not settle: a loop between them?")

    def _step(self) -> bool:
        moved = False
        names = self.names
        self.dispatcher.now_ms = self.memory_projector.now_ms = self.decider.now_ms = self.now_ms
        for record in self._new(self.decider, names.events):
            if not self._dispatch(lambda r=record: self.dispatcher.pipe(names.events, r.value, r.key,  # type: ignore[misc]
                                                                         headers=r.headers)):
                self._seen[(names.events, record.partition if record.partition >= 0 else 0)] -= 1
                return True  # the restarted dispatcher reads the event again
            self.memory_projector.pipe(names.events, record.value, record.key, headers=record.headers)
            self._journal(record)
            moved = True
        for record in self._new(self.dispatcher, names.commands):
            self.decider.pipe(names.commands, record.value, record.key, headers=record.headers)
            moved = True
        for record in self._new(self.decider, names.commands):  # cross-run commands (child runs)
            self.decider.pipe(names.commands, record.value, record.key, headers=record.headers)
            moved = True
        for record in self._new(self.decider, names.state):
            key = (record.key or b"").decode()
            if record.value is None:
                self._states.pop(key, None)
            else:
                self._states[key] = load_state(record.value)
        for record in self._new(self.decider, names.user_view):
            self._views[(record.key or b"").decode()] = record.value or b""
        for record in self._new(self.memory_projector, names.memory):
            key = (record.key or b"").decode()
            if record.value is None:
                self._memories.pop(key, None)
            else:
                self._memories[key] = record.value
        return moved

    def _journal(self, record: OutputRecord) -> None:
        event = None if record.value is None else codec.decode(record.value)
        if isinstance(event, EventBase):  # the events topic holds nothing else
            self.journal(event.runId).add(Entry(record.offset, event, self.now_ms))

    def journal(self, run_id: str) -> Journal:
        """The run's facts as the client reads them (a `runfacts.client` Journal)."""
        found = self._journals.get(run_id)
        if found is None:
            found = self._journals[run_id] = Journal(run_id, 0, complete=True)
        return found

    # --- what happened -----------------------------------------------------------------------

    def events(self, run_id: str) -> list[EventBase]:
        """The run's events, in log order."""
        return [entry.event for entry in self.journal(run_id).entries]

    def event_types(self, run_id: str) -> list[str]:
        return [entry.event_type for entry in self.journal(run_id).entries]

    def states(self) -> dict[str, RunState]:
        """Every run's latest state (the run-state topic, compacted)."""
        return dict(self._states)

    def view(self, run_id: str) -> dict[str, Any] | None:
        """The run's user view as the decider published it."""
        raw = self._views.get(run_id)
        return None if not raw else dict(user_view.schema().decode(raw))

    def memories(self) -> list[memory_view.MemoryEntry]:
        """The memory topic's entries (what `rf.memory` reads)."""
        return [memory_view.decode(raw) for raw in self._memories.values()]

    def executions(self, capability: str | None = None) -> list[ToolRequest]:
        """The requests the tools ran (of one capability, or all), in order."""
        return [r for cid, found in self.executed.items() if capability in (None, cid) for r in found]

    def lookups(self, capability: str | None = None) -> list[str]:
        """The external request ids the tools' lookups were asked about."""
        return [r for cid, found in self.looked_up.items() if capability in (None, cid) for r in found]
