"""`TestClient`: the `runfacts.client.Runfacts` API over a `TestStack` (shell).

The handles are runfacts.client's own (`Run`, `ToolCall`, `Approval`, the errors): the same
outcome checks decide what `call.result()` returns or raises, so an agent written against
`Runfacts` runs unchanged against the test stack (`def my_agent(rf): ...`). What differs:
- a command is decided before the method returns (the stack settles in the caller's thread);
- a wait (`result`, `decision`, `view`) never blocks: when nothing is left to happen, it hands
  pending approvals to the stack's `on_approval` hooks (the person who decides meanwhile), then skips
  the clock to the next timer (an approval's expiry, a retry, a reconciliation) as long as that
  stays within its timeout (`time_skipping`), else it raises `WaitTimeout` — or `Stuck` when the
  wait has no timeout and no timer is left (or time skipping is off): nothing can ever end it;
- the argument store is in memory, outbox `transaction()` is not offered.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from datetime import datetime
from typing import TYPE_CHECKING, Any

from runfacts.client.approvals import UiSettings
from runfacts.client.core import (
    AGENT_SOURCE,
    Answer,
    Await,
    Blocking,
    ClientCore,
    ClientSettings,
    Deliver,
    Pause,
    Step,
    Steps,
    command_answer,
    result_types_of,
)
from runfacts.client.errors import ClientError, RunNotFound, WaitTimeout
from runfacts.client.outcomes import Resolved, command_events, version_after
from runfacts.client.output import Chunk, MemorySink
from runfacts.client.run import Run
from runfacts.privacy.envelope import NO_KEYS, KeyView
from runfacts.processors.decider.state import RunState
from runfacts.processors.policy.capabilities import CapabilityManifest
from runfacts.projections import memory as memory_view
from runfacts.projections.user_view import as_json, user_view
from runfacts.schemas.common import Actor, CommandBase

if TYPE_CHECKING:
    from runfacts.client.follower import Journal
    from runfacts.testing.stack import TestStack


class Stuck(WaitTimeout):
    """A wait without a timeout that nothing in the test stack can ever end (no timer is set):
    in production it would block until someone acts (e.g. decides the approval)."""

    def __init__(self, run_id: str, what: str, tool_call_id: str | None = None) -> None:
        self.what, self.timeout_s = what, 0.0
        ClientError.__init__(self, run_id, f"no {what}: nothing left to happen in the test stack and no timer "
                                           "is set (decide the pending approval, or send what the run waits "
                                           "for, before waiting)", tool_call_id)


class TestClient(ClientCore):
    """A `Runfacts` whose decider and dispatcher are the `TestStack`'s, in this process: the same
    operations (`runfacts.client.core`), its steps carried out on the stack."""

    __test__ = False

    def __init__(self, stack: TestStack, agent: str = "agent-harness") -> None:
        self.stack = stack
        self.names = stack.names
        self.settings = ClientSettings(agent=agent, ui=UiSettings(signing_env=stack.signing_env))
        self.versions = stack.context.current_versions
        self.keys: Callable[[], KeyView] = lambda: NO_KEYS
        self.actor = Actor(subjectId=agent, roles=("agent",), authSource=AGENT_SOURCE)
        self.capabilities: dict[str, CapabilityManifest] = dict(stack.catalog.capabilities)
        self.result_types: dict[str, Callable[[Any], Any]] = result_types_of(stack.registry)
        self._output = MemorySink()  # the run's partial output, in this process (runfacts.client.output)

    def close(self) -> None:
        """Nothing to release (the stack owns everything)."""

    def __enter__(self) -> TestClient:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    def transaction(self) -> Any:
        raise ClientError("-", "the test stack has no outbox: transaction() needs Runfacts.connect(outbox=...)")

    # --- what the operations read ----------------------------------------------------------

    def _now(self) -> datetime:
        return self.stack.now()

    def _journal(self, run_id: str, backfill: bool) -> Journal:
        return self.stack.journal(run_id)

    def _watched(self, run_id: str) -> bool:
        return True  # the stack's journals hold every run from its start

    def _unwatch(self, run_id: str) -> None:
        """The stack keeps every journal."""

    def state(self, run_id: str) -> RunState:
        state = self.stack.states().get(run_id)
        if state is None:
            raise RunNotFound(run_id)
        return state

    def _states(self) -> Iterable[RunState]:
        return self.stack.states().values()

    def _view_once(self, run_id: str, role: str) -> dict[str, Any] | None:
        self.stack.settle()
        if role == "user":
            return self.stack.view(run_id)
        made = user_view(self.stack.states().get(run_id), role)  # type: ignore[arg-type]
        return None if made is None else as_json(made)

    def _view(self, run_id: str, role: str, min_version: int | None, timeout: float | None) -> Steps[dict[str, Any]]:
        """The view as the stack holds it now (it is settled: waiting would change nothing)."""
        return (yield from super()._view(run_id, role, min_version, 0.0))

    def _memories(self) -> Iterable[memory_view.MemoryEntry]:
        self.stack.settle()
        return self.stack.memories()

    def output_producer(self) -> MemorySink:
        return self._output

    def _output_chunks(self, run_id: str) -> list[Chunk]:
        return [c for c in self._output.chunks if c.runId == run_id]

    # --- carrying out a step ----------------------------------------------------------------

    def _effect(self, step: Step) -> Any:
        match step:
            case Deliver(run=run, command=command, arguments=arguments):
                if arguments is not None:
                    self.stack.args.put(arguments)
                return self.deliver(run, command)
            case Await(run=run, check=check, what=what, timeout=timeout, tool_call_id=call_id):
                return self.wait(run, check, what, timeout, call_id)
            case Blocking(call=call):
                return call()
            case Pause():
                return None
        raise TypeError(step)

    async def _effect_async(self, step: Step) -> Any:
        return self._effect(step)  # the stack answers without blocking

    def deliver(self, run: Run | None, command: CommandBase, *_ignored: Any) -> Answer:
        """One command to the stack's decider, decided before this returns."""
        self.stack.send(command)
        if run is None:
            return Answer((), None)
        found = command_events(run.journal.entries, command.commandId)
        events = command_answer(run.id, found, f"{command.commandType} {command.commandId}")
        return Answer(events, version_after(run.journal.entries, found[-1].offset))

    def wait(self, run: Run, check: Callable[[Journal], Resolved | None], what: str, timeout: float | None,
             tool_call_id: str | None = None) -> Any:
        """`check` over the run's facts; with nothing left to happen, skip the clock to the next
        timer within `timeout` (see the module docstring)."""
        stack = self.stack
        stack.settle()
        limit_ms = None if timeout is None else stack.now_ms + int(timeout * 1000)
        while True:
            resolved = check(run.journal)
            if resolved is not None:
                return resolved.unwrap()
            if stack.hand_out_approvals():
                continue
            due = stack.next_due_ms() if stack.time_skipping else None
            if due is None or (limit_ms is not None and due > limit_ms):
                if limit_ms is None:
                    raise Stuck(run.id, what, tool_call_id)
                if stack.time_skipping:
                    stack.advance_to(limit_ms)
                raise WaitTimeout(run.id, what, timeout or 0.0, tool_call_id)
            stack.advance_to(max(due, stack.now_ms))
