"""What each route does, as commands through `runfacts.client` (shell): no rule lives here.

Every write is a command on the commands topic, signed server-side for the key's auth source
by the client's sender, validated by the run decider and answered with the version it
committed; a refusal comes back as the decider's reason code. The actor on every command is
the authenticated key's (subject, roles, tenant, source): a caller cannot choose it, and an
approval decided here is attributed to the key's subject. A command's id is derived from the
key and its Idempotency-Key, so a retry that reaches another gateway instance is a duplicate
the decider recognises, never a second effect.

Reads: a run's state and role view (waiting, bounded, for `min_version`), pending approvals
for a role. A key bound to a tenant (the access policy's `tenant_bound`) reads only its
tenant's runs; a key whose only role is `user` reads only its own runs.
"""

from __future__ import annotations

import hashlib
import threading
import time
import uuid
from collections import Counter, OrderedDict
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from runfacts.client import Answer as ClientAnswer
from runfacts.client import Approval, CommandRejected, Run, Runfacts, RunNotFound, display_lines, outcomes
from runfacts.client.approvals import approvals_of, resume_for, resume_payload
from runfacts.client.errors import BadArgument
from runfacts.client.output import Chunk, may_write
from runfacts.gateway import models as m
from runfacts.gateway.limits import Owner, Owners
from runfacts.gateway.problems import ProblemError
from runfacts.processors.policy.access import Policy, tenant_bound
from runfacts.processors.policy.retry import args_hash
from runfacts.projections.user_view import as_json, user_view
from runfacts.schemas import commands as cmd
from runfacts.schemas import events as ev
from runfacts.schemas.common import Actor, BudgetAmounts, CommandBase
from runfacts.schemas.models import new_command, payload_class
from runfacts.security.approvals import sign_approval


@dataclass(frozen=True)
class ServiceSettings:
    answer_timeout_s: float = 30.0
    """How long a write waits for the decider's answer."""
    max_wait_s: float = 30.0
    """The longest `wait` a read with `min_version` may ask for."""
    watched_runs: int = 1_000
    """Runs whose facts the client's follower keeps between requests (least recently used go)."""
    owners_ttl_s: float = 30.0
    """How long a stream's read check trusts the tenant and user it read of a run (they are set when
    the run starts; a key's right to read is checked anew, only the run's state is not read again)."""
    owners_cached: int = 20_000


def sha256(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


class Service:
    """The gateway's commands and reads over one `Runfacts` client."""

    def __init__(self, rf: Runfacts, policy: Policy, settings: ServiceSettings = ServiceSettings()) -> None:
        self.rf, self.policy, self.settings = rf, policy, settings
        self._lock = threading.Lock()
        self._using: Counter[str] = Counter()
        self._recent: OrderedDict[str, None] = OrderedDict()
        self._owners = Owners(settings.owners_ttl_s, settings.owners_cached)

    # --- handles ---------------------------------------------------------------------------

    @contextmanager
    def _run(self, run_id: str, new: bool = False) -> Iterator[Run]:
        """A handle on the run for one request. The follower keeps the journals of the
        `watched_runs` runs used last (so a run's next command needs no read back of its
        facts) and lets older ones go once no request uses them: memory stays bounded.
        `new`: the run is being created, so a journal started now holds it from its start."""
        with self._lock:
            self._using[run_id] += 1
            self._recent.pop(run_id, None)
            fresh = not self.rf.follower.watching(run_id)
        journal = self.rf.follower.watch(run_id, backfill=False)
        if new and fresh:
            journal.complete = True
        try:
            yield Run(self.rf, run_id, journal)
        except CommandRejected:
            if new and fresh:
                journal.complete = False  # it existed before: its earlier facts are not in this journal
            raise
        finally:
            self._release(run_id)

    def _release(self, run_id: str) -> None:
        with self._lock:
            self._using[run_id] -= 1
            if self._using[run_id] <= 0:
                del self._using[run_id]
            self._recent[run_id] = None
            gone = []
            while len(self._recent) > self.settings.watched_runs:
                oldest = next(iter(self._recent))
                del self._recent[oldest]
                if oldest not in self._using:
                    gone.append(oldest)
        for old in gone:
            self.rf.follower.forget(old)

    def _command(self, actor: Actor, run_id: str, cls: type[CommandBase], payload: dict[str, Any],
                 command_id: str) -> CommandBase:
        try:
            return new_command(cls, commandId=command_id, runId=run_id, actor=actor, issuedAt=datetime.now(UTC),
                               correlationId=run_id, payload=payload_class(cls)(**payload))
        except ValueError as exc:
            raise BadArgument(run_id, cls.__name__, "(payload)", f"does not validate: {exc}") from exc

    def _send(self, run: Run, command: CommandBase, send: Callable[[], Any] | None = None) -> int:
        return self._answer(run, command, send).version  # type: ignore[return-value]

    def _answer(self, run: Run, command: CommandBase, send: Callable[[], Any] | None = None) -> ClientAnswer:
        earlier = self._answered(run, command.commandId)
        if earlier is not None:
            return earlier
        answer = self.rf.deliver(run, command, send or (lambda: self.rf.sender.send(command)),
                                 self.settings.answer_timeout_s)
        assert answer.version is not None  # never inside an outbox transaction here
        return answer

    def _answered(self, run: Run, command_id: str) -> ClientAnswer | None:
        """The decider's answer to `command_id` if the run's facts already hold it: a retry whose
        first try was applied (on another gateway instance, or after its record expired) is a
        duplicate the decider drops without answering again, so the answer is read, not awaited."""
        if not run.journal.complete:
            self.rf.follower.backfill([run.journal])
            run.journal.complete = True
        found = outcomes.command_events(run.journal.entries, command_id)
        if not found:
            return None
        events = tuple(e.event for e in found)
        error = outcomes.command_error(run.id, events)
        if error is not None:
            raise error
        return ClientAnswer(events, outcomes.version_after(run.journal.entries, found[-1].offset))

    # --- writes ----------------------------------------------------------------------------

    def start(self, actor: Actor, body: m.StartRun, command_id: str) -> m.StartAnswer:
        run_id = body.runId or f"run-{uuid.uuid4().hex}"
        command_id = f"{run_id}:{command_id}"
        payload = {"goalRef": body.goal, "goalSummary": body.summary, "userId": body.userId,
                   "tenant": body.tenant if body.tenant is not None else actor.tenant,
                   "budget": BudgetAmounts(**(body.budget or {})), "versions": self.rf.versions}
        command = self._command(actor, run_id, cmd.CreateRun, payload, command_id)
        try:
            with self._run(run_id, new=True) as run:
                return m.StartAnswer(runId=run_id, version=self._send(run, command), commandId=command_id,
                                     created=True)
        except CommandRejected as exc:
            if exc.reason != "run_exists":
                raise
        state = self.readable(actor, run_id)
        return m.StartAnswer(runId=run_id, version=state.version, commandId=command_id, created=False)

    def reason(self, actor: Actor, run_id: str, body: m.RecordReasoning, command_id: str) -> m.ReasoningAnswer:
        digest = sha256(body.conclusion)
        rid = body.reasoningId or f"reasoning-{digest[:16]}"
        goal = body.goal or self.readable(actor, run_id).goalRef
        command_id = f"{run_id}:{command_id}"
        command = self._command(actor, run_id, cmd.RecordReasoning, {
            "reasoningObjectId": rid, "goalRef": goal, "evidenceRefs": tuple(body.evidence),
            "conclusionHash": digest, "conclusionRef": body.ref}, command_id)
        with self._run(run_id) as run:
            return m.ReasoningAnswer(runId=run_id, version=self._send(run, command), commandId=command_id,
                                     reasoningId=rid)

    def propose(self, actor: Actor, run_id: str, body: m.ProposeCall, command_id: str) -> m.ProposeAnswer:
        digest = args_hash(body.arguments)
        call_id = body.toolCallId or f"call-{sha256(f'{run_id}|{body.capability}|{body.target}|{digest}')[:20]}"
        action = body.action or body.capability.rsplit(".", 1)[-1]
        command_id = f"{run_id}:{command_id}"
        command = self._command(actor, run_id, cmd.ProposeToolCall, {
            "toolCallId": call_id, "capabilityId": body.capability, "reasoningObjectId": body.reasoningId,
            "argsHash": digest, "argsRef": f"args-{digest}", "target": body.target, "action": action,
            "risk": body.risk, "summary": body.summary or f"{action} {body.target}", "businessKey": body.businessKey,
            "display": self.rf.display(body.capability, body.arguments)},  # what the approver will see
            command_id)

        def build(ref: str, stored: str) -> CommandBase:
            if (ref, stored) != (f"args-{digest}", digest):
                raise BadArgument(run_id, "arguments", "(stored)", f"the argument store returned {ref}")
            return command

        with self._run(run_id) as run:
            try:
                answer = self._answer(run, command, lambda: self.rf.sender.propose(build, body.arguments))
                version = answer.version or 0  # never None here (_answer asserts it)
                found = [e.payload.approvalId for e in answer.events if isinstance(e, ev.ApprovalRequired)]
            except CommandRejected as exc:
                if exc.reason != "already_proposed":
                    raise
                state = self.readable(actor, run_id)  # proposed before: the same call
                version = state.version
                found = [a.approvalId for a in state.open_approvals() if a.toolCallId == call_id]
        return m.ProposeAnswer(runId=run_id, version=version, commandId=command_id, toolCallId=call_id,
                               argsHash=digest, approvalId=found[0] if found else None)

    def end(self, actor: Actor, run_id: str, kind: str, body: m.EndRun, command_id: str) -> m.Answer:
        cls: type[CommandBase] = cmd.StopRun if kind == "stop" else cmd.CancelRun
        command_id = f"{run_id}:{command_id}"
        command = self._command(actor, run_id, cls, {"reason": body.reason}, command_id)
        self.readable(actor, run_id)
        with self._run(run_id) as run:
            return m.Answer(runId=run_id, version=self._send(run, command), commandId=command_id)

    def decide(self, actor: Actor, run_id: str, approval_id: str, body: m.DecideApproval,
               command_id: str) -> m.DecisionAnswer:
        """The key's actor decides: the signed token binds its subject (never a body field)."""
        approval = self._approval(actor, run_id, approval_id)
        now_ms = int(datetime.now(UTC).timestamp() * 1000)
        _, request = resume_for(approval, body.decision, actor, actor.authSource)
        token = sign_approval(request, now_ms, environ=self.rf.settings.ui.signing_env)
        command_id = f"{run_id}:{command_id}"
        command = self._command(actor, run_id, cmd.ResumeRun, resume_payload(request, token), command_id)
        with self._run(run_id) as run:
            version = self._send(run, command)
        return m.DecisionAnswer(runId=run_id, version=version, commandId=command_id, approvalId=approval_id,
                                decision=body.decision, approver=actor.subjectId)

    def output(self, actor: Actor, run_id: str, body: m.WriteOutput) -> m.OutputAnswer:
        """One chunk of the run's partial output, on the topic before the answer (the run's agent
        only: `runfacts.client.output.may_write`)."""
        why = may_write(actor, self.readable(actor, run_id).tenant)
        if why is not None:
            raise ProblemError(403, "output-forbidden", "This key may not write the run's output", why,
                               field="Authorization", fix="write a run's output with its agent service's key "
                                                          "(role agent, not a browser's)")
        chunk = Chunk(run_id, body.stream, body.seq, body.text, body.done,
                      body.status or ("done" if body.done else None), actor.subjectId, datetime.now(UTC).isoformat())
        producer = self.rf.output_producer()
        producer.send(chunk)
        producer.flush(self.settings.answer_timeout_s)
        return m.OutputAnswer(runId=run_id, stream=chunk.stream, seq=chunk.seq, chunkId=chunk.id)

    def _approval(self, actor: Actor, run_id: str, approval_id: str) -> Approval:
        state = self.readable(actor, run_id)
        if approval_id not in state.approvals:
            raise ProblemError(404, "approval-not-found", "No such approval", f"run {run_id} has no approval "
                               f"{approval_id}", field="approvalId", fix="list pending approvals: GET /approvals")
        found = [a for a in approvals_of([state], None, None, datetime.now(UTC)) if a.approval_id == approval_id]
        if not found:
            raise ProblemError(409, "approval-not-open", "The approval is no longer open",
                               f"approval {approval_id} of run {run_id} was decided, expired or invalidated",
                               field="approvalId", fix="read the run's view for what happened to it")
        return found[0]

    # --- reads -----------------------------------------------------------------------------

    def readable(self, actor: Actor, run_id: str) -> Any:
        """The run's state if this key may read it; RunNotFound otherwise (never says it exists)."""
        state = self.rf.states.latest(run_id)
        if state is not None:
            with self._lock:
                self._owners.remember(run_id, Owner(state.tenant, state.userId), time.monotonic())
        if state is None or not self.may_read(actor, state):
            raise RunNotFound(run_id)
        return state

    def readable_known(self, actor: Actor, run_id: str) -> bool:
        """Whether this key may read the run, from its owner read in the last `owners_ttl_s` (no
        read of the run's state; False: not known, check with `readable`)."""
        with self._lock:
            owner = self._owners.get(run_id, time.monotonic())
        return owner is not None and self.may_read(actor, owner)

    def may_read(self, actor: Actor, state: Any) -> bool:
        """`state`: the run's state, or its `Owner` (tenant and user: all this looks at)."""
        if tenant_bound(self.policy, actor) and state.tenant != actor.tenant:
            return False
        return set(actor.roles) != {"user"} or state.userId == actor.subjectId

    def state(self, actor: Actor, run_id: str, min_version: int | None, wait_s: float | None) -> dict[str, Any]:
        state = self._wait(run_id, min_version, wait_s, lambda: self.readable(actor, run_id),
                           lambda s: s.version)
        return state.model_dump(mode="json")  # type: ignore[no-any-return]

    def view_role(self, actor: Actor) -> str:
        return next((r for r in ("operator", "auditor") if r in actor.roles), "user")

    def view(self, actor: Actor, run_id: str, min_version: int | None, wait_s: float | None) -> dict[str, Any]:
        self.readable(actor, run_id)
        role = self.view_role(actor)

        def read() -> dict[str, Any]:
            if role == "user":
                found = self.rf.states.latest_view(run_id)
            else:
                shown = user_view(self.readable(actor, run_id), role)  # type: ignore[arg-type]
                found = None if shown is None else as_json(shown)
            if found is None:
                raise RunNotFound(run_id)
            return found

        return self._wait(run_id, min_version, wait_s, read, lambda v: int(v["version"]))

    def _wait(self, run_id: str, min_version: int | None, wait_s: float | None, read: Callable[[], Any],
              version: Callable[[Any], int]) -> Any:
        limit = min(self.settings.max_wait_s, 10.0 if wait_s is None else wait_s)
        deadline = time.monotonic() + limit
        while True:
            found = read()
            if min_version is None or version(found) >= min_version:
                return found
            if time.monotonic() >= deadline:
                raise ProblemError(412, "version-not-reached", "The run is not at that version yet",
                                   f"run {run_id} is at version {version(found)} after {limit:g}s, "
                                   f"min_version={min_version} was asked", field="min_version",
                                   fix="ask again (a longer wait=), or use a version a write answered",
                                   headers={"Retry-After": "1"}, version=version(found))
            time.sleep(0.05)

    def approvals(self, actor: Actor, role: str | None) -> list[m.ApprovalItem]:
        if role is not None and role not in actor.roles:
            raise ProblemError(403, "role-not-held", "The key does not hold that role",
                               f"role={role!r} is not one of this key's roles {list(actor.roles)}", field="role",
                               fix="ask for one of the key's roles, or leave role out")
        tenant = actor.tenant if tenant_bound(self.policy, actor) else None
        found = [a for a in self.rf.approvals(role=role, tenant=tenant)
                 if role is not None or a.required_role in actor.roles]
        return [m.ApprovalItem(runId=a.run_id, approvalId=a.approval_id, toolCallId=a.tool_call_id, asks=a.asks,
                               risk=a.risk, requiredRole=a.required_role, expiresAt=a.expires_at,
                               argsHash=a.args_hash, tenant=a.tenant, requesters=list(a.requesters),
                               arguments=display_lines(a.display),
                               displayDigest=a.display_digest) for a in found]


def command_id_for(key_name: str, idempotency_key: str) -> str:
    """The command id a key's Idempotency-Key stands for (the same on every gateway instance)."""
    return "gw-" + sha256(f"{key_name}\x00{idempotency_key}")[:32]


__all__ = ["Service", "ServiceSettings", "command_id_for"]
