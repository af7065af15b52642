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

import uuid
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from runfacts.client import outcomes
from runfacts.client.approvals import Approval, UiSettings, approvals_of, resume_for, resume_payload
from runfacts.client.client import (
    AGENT_SOURCE,
    Answer,
    ClientSettings,
    argument_display,
    child_created,
    child_ended,
    manifests_of,
)
from runfacts.client.errors import BadArgument, ClientError, CommandRejected, RunNotFound, WaitTimeout
from runfacts.client.outcomes import Resolved
from runfacts.client.run import ProposedMemory, Run, ToolCall, budget_amounts, memory_scope
from runfacts.privacy.envelope import NO_KEYS, KeyView
from runfacts.processors.decider.state import TERMINAL, RunState
from runfacts.processors.policy.capabilities import CapabilityManifest
from runfacts.processors.policy.retry import args_hash
from runfacts.projections import memory as memory_view
from runfacts.projections.user_view import as_json, user_view
from runfacts.schemas import commands as cmd
from runfacts.schemas import events as ev
from runfacts.schemas.common import Actor, ArgDisplay, BudgetAmounts, CommandBase
from runfacts.schemas.models import new_command, payload_class
from runfacts.security.approvals import ApprovalRequest, sign_approval

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


class TestClient:
    """A `Runfacts` whose decider and dispatcher are the `TestStack`'s, in this process."""

    __test__ = False

    def __init__(self, stack: TestStack, agent: str = "agent-harness") -> None:
        self.stack = stack
        self.names = stack.names
        self.settings = ClientSettings(agent=agent, ui=UiSettings(signing_env=stack.signing_env))
        self.versions = stack.context.current_versions
        self.keys: Callable[[], KeyView] = lambda: NO_KEYS
        self.actor = Actor(subjectId=agent, roles=("agent",), authSource=AGENT_SOURCE)
        self.capabilities: dict[str, CapabilityManifest] = dict(stack.catalog.capabilities)

    def learn(self, capabilities: Any) -> None:
        """Display proposals with these manifests too, as `Runfacts.learn` (the stack's registry
        is known already)."""
        self.capabilities.update(manifests_of(capabilities))

    def display(self, capability: str, arguments: dict[str, Any]) -> ArgDisplay:
        """The argument display of a proposal, as `Runfacts.display` builds it."""
        return argument_display(self.capabilities, capability, arguments)

    def close(self) -> None:
        """Nothing to release (the stack owns everything)."""

    def __enter__(self) -> TestClient:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    # --- runs ------------------------------------------------------------------------------

    def start_run(self, *, goal: str, summary: str, user_id: str, tenant: str | None = None,
                  budget: BudgetAmounts | dict[str, int] | None = None, run_id: str | None = None,
                  actor: Actor | None = None) -> Run:
        """Create a run (idempotent on run_id), as `Runfacts.start_run`."""
        run_id = run_id or f"run-{uuid.uuid4().hex}"
        for name, value in (("run_id", run_id), ("goal", goal), ("user_id", user_id)):
            if not isinstance(value, str) or not value.strip():
                raise BadArgument(run_id if name != "run_id" else "?", name, value, "must be a non-empty string")
        amounts = budget_amounts(run_id, "budget", budget)
        run = Run(self, run_id, self.stack.journal(run_id))  # type: ignore[arg-type]
        payload = {"goalRef": goal, "goalSummary": summary, "userId": user_id, "tenant": tenant,
                   "budget": amounts, "versions": self.versions}
        try:
            run.version = self.command(run, cmd.CreateRun, payload, actor).version
        except CommandRejected as exc:
            if exc.reason != "run_exists":
                raise
            return self.run(run_id)
        return run

    def start_child(self, parent: Run, *, goal: str, summary: str, budget: BudgetAmounts | dict[str, int],
                    run_id: str | None = None, timeout: float | None = None) -> Run:
        """Start a child run of `parent`, as `Runfacts.start_child` (created before this returns)."""
        run_id = run_id or f"run-{uuid.uuid4().hex}"
        for name, value in (("run_id", run_id), ("goal", goal), ("summary", summary)):
            if not isinstance(value, str) or not value.strip():
                raise BadArgument(parent.id, name, value, "must be a non-empty string")
        amounts = budget_amounts(run_id, "budget", budget)
        child = Run(self, run_id, self.stack.journal(run_id))  # type: ignore[arg-type]
        answer = self.command(parent, cmd.StartChildRun, {"childRunId": run_id, "goalRef": goal,
                                                          "goalSummary": summary, "budget": amounts})
        parent.version = answer.version
        requested = next(e for e in answer.events if isinstance(e, ev.ChildRunRequested))
        child.version = self.wait(child, child_created(run_id, requested), f"child {run_id} created", timeout)
        return child

    def child_report(self, parent: Run, child_id: str, timeout: float | None = None) -> ev.ChildRunReportedPayload:
        """The parent's fold of its child's end, as `Runfacts.child_report`."""
        return self.wait(parent, child_ended(child_id), f"end of child {child_id}", timeout)  # type: ignore[no-any-return]

    def run(self, run_id: str) -> Run:
        """Re-attach to a run by id (RunNotFound if it has no facts)."""
        journal = self.stack.journal(run_id)
        if not journal.entries:
            raise RunNotFound(run_id)
        return Run(self, run_id, journal, outcomes.version_after(journal.entries, journal.entries[-1].offset))  # type: ignore[arg-type]

    def open_runs(self, *, user_id: str | None = None, tenant: str | None = None,
                  agent: str | None = None) -> list[Run]:
        """Runs not ended yet, created by this agent unless `agent` names another."""
        who = agent or self.settings.agent
        wanted = [s for s in self.stack.states().values()
                  if s.status not in TERMINAL and not s.archived and s.createdBy.subjectId == who
                  and (user_id is None or s.userId == user_id) and (tenant is None or s.tenant == tenant)]
        return [Run(self, s.runId, self.stack.journal(s.runId), s.version) for s in wanted]  # type: ignore[arg-type]

    def goal_of(self, run: Run) -> str:
        created = next((e.event for e in run.journal.entries if isinstance(e.event, ev.RunCreated)), None)
        if created is None:
            raise RunNotFound(run.id)
        return created.payload.goalRef

    def pending_calls(self, run: Run) -> list[ToolCall]:
        state = self.state(run.id)
        held = sorted((c for c in state.toolCalls.values() if c.closedReason is None), key=lambda c: c.proposedAt)
        return [ToolCall(run, c.toolCallId, c.capabilityId, c.argsHash, None) for c in held]

    def state(self, run_id: str) -> RunState:
        state = self.stack.states().get(run_id)
        if state is None:
            raise RunNotFound(run_id)
        return state

    # --- commands --------------------------------------------------------------------------

    def _new(self, run_id: str, cls: type[CommandBase], payload: dict[str, Any], actor: Actor | None = None) -> Any:
        try:
            return new_command(cls, commandId=f"{run_id}:{uuid.uuid4().hex[:20]}", runId=run_id,
                               actor=actor or self.actor, issuedAt=self.stack.now(), correlationId=run_id,
                               payload=payload_class(cls)(**payload))
        except ValueError as exc:
            raise BadArgument(run_id, cls.__name__, payload, f"does not validate: {exc}") from exc

    def command(self, run: Run, cls: type[CommandBase], payload: dict[str, Any], actor: Actor | None = None,
                timeout: float | None = None) -> Answer:
        """Send one command and return the decider's answer (it is decided before this returns)."""
        return self.deliver(run, self._new(run.id, cls, payload, actor))

    def deliver(self, run: Run, command: CommandBase, *_ignored: Any) -> Answer:
        self.stack.send(command)
        journal = run.journal
        found = outcomes.command_events(journal.entries, command.commandId)
        if not found:
            raise ClientError(run.id, f"the decider did not answer {command.commandType} {command.commandId}")
        events = tuple(e.event for e in found)
        error = outcomes.command_error(run.id, events)
        if error is not None:
            raise error
        return Answer(events, outcomes.version_after(journal.entries, found[-1].offset))

    def propose(self, run: Run, capability: str, arguments: dict[str, Any], call_id: str,
                fields: dict[str, Any], actor: Actor | None = None) -> ToolCall:
        """Store the arguments (content-addressed), send the proposal, return its call."""
        ref, digest = self.stack.args.put(arguments)
        assert digest == args_hash(arguments)
        command = self._new(run.id, cmd.ProposeToolCall, {**fields, "toolCallId": call_id, "argsRef": ref,
                                                          "argsHash": digest,
                                                          "display": self.display(capability, arguments)}, actor)
        try:
            answer = self.deliver(run, command)
        except CommandRejected as exc:
            if exc.reason != "already_proposed":
                raise
            answer = Answer((), None)
        return ToolCall(run, call_id, capability, digest, answer.version)

    def transaction(self) -> Any:
        raise ClientError("-", "the test stack has no outbox: transaction() needs Runfacts.connect(outbox=...)")

    # --- waiting ---------------------------------------------------------------------------

    def wait(self, run: Run, check: Callable[[Journal], Resolved | None], what: str, timeout: float | None,
             tool_call_id: str | None = None) -> Any:
        """`check` over the run's facts; with nothing left to happen, skip the clock to the next
        timer within `timeout` (see the module docstring)."""
        stack = self.stack
        stack.settle()
        limit_ms = None if timeout is None else stack.now_ms + int(timeout * 1000)
        while True:
            resolved = check(run.journal)  # type: ignore[arg-type]
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

    async def wait_async(self, run: Run, check: Callable[[Journal], Resolved | None], what: str,
                         timeout: float | None, tool_call_id: str | None = None) -> Any:
        """`wait`, awaitable (the stack answers without blocking)."""
        return self.wait(run, check, what, timeout, tool_call_id)

    def view(self, run_id: str, role: str, min_version: int | None, timeout: float | None) -> dict[str, Any]:
        """The run's `role` view once it reflects `min_version`."""
        self.stack.settle()
        if role == "user":
            found = self.stack.view(run_id)
        elif role in ("operator", "auditor"):
            made = user_view(self.stack.states().get(run_id), role)  # type: ignore[arg-type]
            found = None if made is None else as_json(made)
        else:
            raise BadArgument(run_id, "role", role, "must be user, operator or auditor")
        if found is None or (min_version is not None and found["version"] < min_version):
            seen = None if found is None else found["version"]
            raise WaitTimeout(run_id, f"{role} view at version >= {min_version} (latest: {seen})", timeout or 0.0)
        return found

    # --- for UIs ---------------------------------------------------------------------------

    def approvals(self, *, role: str | None = None, tenant: str | None = None,
                  personal: bool = False) -> list[Approval]:
        """Pending approvals (open, not expired at the stack's clock), oldest first, each with its
        argument display; personal values masked unless `personal` (the stack seals nothing)."""
        return approvals_of(self.stack.states().values(), role, tenant, self.stack.now(), personal)

    def decide(self, approval: Approval, decision: str, *, approver: str | Actor,
               timeout: float | None = None, wait: bool = True) -> int | None:
        """Approve or reject, signed with the stack's approval keys; returns the version."""
        actor, request = resume_for(approval, decision, approver, self.settings.ui.auth_source)
        token = sign_approval(request, self.stack.now_ms, environ=self.settings.ui.signing_env)
        run = Run(self, approval.run_id, self.stack.journal(approval.run_id))  # type: ignore[arg-type]
        version = self.command(run, cmd.ResumeRun, resume_payload(request, token), actor).version
        return version if wait else None

    def memory(self, scope: tuple[str, str]) -> list[memory_view.MemoryEntry]:
        """Confirmed, unexpired, unrevoked memories of `scope` (from the memory projector's topic)."""
        self.stack.settle()
        tenant, kind, name = memory_scope("<memory>", scope)
        found = {memory_view.memory_key(e): e for e in self.stack.memories()}
        return memory_view.entries(found, (tenant, kind, name), self.stack.now())

    def review_memory(self, run_id: str, memory: ProposedMemory, decision: str, *, reviewer: str | Actor,
                      timeout: float | None = None) -> int | None:
        """Confirm or reject a memory candidate as `reviewer`, as `Runfacts.review_memory`."""
        actor = reviewer if isinstance(reviewer, Actor) else Actor(
            subjectId=reviewer, roles=("memory_reviewer",), tenant=memory.tenant,
            authSource=self.settings.ui.auth_source)
        request = ApprovalRequest(run_id, memory.id, memory.candidate_hash, decision, actor.subjectId)
        token = sign_approval(request, self.stack.now_ms, environ=self.settings.ui.signing_env)
        payload = {"memoryId": memory.id, "decision": decision, "candidateHash": memory.candidate_hash,
                   "reviewToken": token}
        run = Run(self, run_id, self.stack.journal(run_id))  # type: ignore[arg-type]
        return self.command(run, cmd.ReviewMemory, payload, actor).version

    def revoke_memory(self, run_id: str, memory: ProposedMemory, *, reviewer: str | Actor, reason: str = "",
                      timeout: float | None = None) -> int | None:
        """Withdraw a memory as `reviewer`, as `Runfacts.revoke_memory`."""
        actor = reviewer if isinstance(reviewer, Actor) else Actor(
            subjectId=reviewer, roles=("memory_reviewer",), tenant=memory.tenant,
            authSource=self.settings.ui.auth_source)
        run = Run(self, run_id, self.stack.journal(run_id))  # type: ignore[arg-type]
        return self.command(run, cmd.RevokeMemory, {"memoryId": memory.id, "reason": reason}, actor).version
