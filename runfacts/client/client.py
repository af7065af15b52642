"""`Runfacts`: the one process-wide client an agent service (or a UI backend) talks through.

    rf = Runfacts.connect(args_store="harness.db")        # RUNFACTS_KAFKA_* settings, topic prefix
    run = rf.start_run(goal="ticket:T-9001", summary="Refund the damaged kettle", user_id="u-42")
    call = run.propose("payments.refund", {"orderId": "o-1", "amountMinor": 4200, "currency": "EUR"},
                       target="o-1")
    refund = call.result(timeout=600)                      # approval, dispatch, reconciliation behind it

One sender (an idempotent producer, or the service's outbox) and ONE follower consumer of the
events topic serve every run of the process. `CreateRun.versions` default to the decider's,
read at connect from the compacted topic `<prefix>.decider.versions` the decider writes at
start; only while that topic is empty (or absent), RUNFACTS_RUN_VERSIONS (the JSON
`runfacts worker decider` also reads) or else the packaged default both sides import
(`runfacts.processors.decider.app.DEFAULT_VERSIONS`), with a log line saying so.
"""

from __future__ import annotations

import asyncio
import logging
import os
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, NamedTuple

from runfacts.client import outcomes
from runfacts.client.approvals import Approval, UiSettings, approvals_of, resume_for, resume_payload, revealed
from runfacts.client.errors import BadArgument, ClientError, CommandRejected, RunNotFound, WaitTimeout
from runfacts.client.follower import Detached, Follower, FollowerSettings, Journal, Waiter
from runfacts.client.outcomes import Entry, Resolved
from runfacts.client.run import ProposedMemory, Run, ToolCall, budget_amounts, memory_scope
from runfacts.client.sender import DirectSender, OutboxSender, Sender
from runfacts.connectors.versions import published_versions
from runfacts.ops.client import ReaderSettings, StateReader
from runfacts.privacy.envelope import NO_KEYS, KeyView
from runfacts.privacy.store import protector_if_configured
from runfacts.processors.decider.app import DEFAULT_VERSIONS
from runfacts.processors.decider.state import TERMINAL, RunState
from runfacts.processors.policy.capabilities import CapabilityCatalog, CapabilityManifest, load_capabilities
from runfacts.processors.policy.display import render
from runfacts.processors.policy.keyring import load_source_keys_if_configured
from runfacts.processors.policy.retry import args_hash
from runfacts.processors.policy.sources import SourceKeys
from runfacts.projections import memory as memory_view
from runfacts.projections.user_view import as_json, user_view
from runfacts.schemas import commands as cmd
from runfacts.schemas import events as ev
from runfacts.schemas.common import Actor, ArgDisplay, BudgetAmounts, CommandBase, EventBase, RunVersions
from runfacts.schemas.errors import ConfigError
from runfacts.schemas.models import new_command, payload_class
from runfacts.security.approvals import ApprovalRequest, sign_approval
from runfacts.settings import KafkaSettings
from runfacts.topics import TopicNames

log = logging.getLogger("runfacts.client")
ENV_VERSIONS = "RUNFACTS_RUN_VERSIONS"
ENV_ARGS_STORE = "RUNFACTS_ARGS_STORE"
AGENT_SOURCE = "agent-harness"
_clients: dict[tuple[str, ...], Runfacts] = {}
_clients_lock = threading.Lock()


class Answer(NamedTuple):
    """The decider's answer to one command: its events and the version it committed."""

    events: tuple[EventBase, ...]
    version: int | None


def connect_versions(kafka: KafkaSettings, names: TopicNames, component: str) -> RunVersions:
    """The versions the decider published on `<prefix>.decider.versions`, else (topic empty or
    absent, logged) `current_versions()`."""
    published = published_versions(kafka.client_config(), names, component)
    if published is not None:
        return published
    fallback = current_versions()
    log.info("no versions published on %s yet (is the decider started?): new runs use %s %s",
             names.decider_versions, "$" + ENV_VERSIONS if os.environ.get(ENV_VERSIONS) else "the packaged default",
             fallback.model_dump_json())
    return fallback


def current_versions(environ: dict[str, str] | None = None) -> RunVersions:
    """The fallback versions: $RUNFACTS_RUN_VERSIONS, else the packaged default."""
    raw = (os.environ if environ is None else environ).get(ENV_VERSIONS, "")
    if not raw:
        return DEFAULT_VERSIONS
    try:
        return RunVersions.model_validate_json(raw)
    except ValueError as exc:
        raise ConfigError(ENV_VERSIONS, raw, f"expected RunVersions JSON ({exc})") from exc


@dataclass(frozen=True)
class ClientSettings:
    """How the client identifies itself and how long it waits by default."""

    agent: str = "agent-harness"
    """The agent's subjectId on its commands (authSource agent-harness, role agent)."""
    timeout_s: float = 30.0
    """Default wait for a command's answer; result() and decision() wait forever unless told."""
    component: str = "client"
    ui: UiSettings = UiSettings()



def manifests_of(capabilities: Any) -> dict[str, CapabilityManifest]:
    """The manifests of a `ToolRegistry`, a `CapabilityCatalog` or a manifest path (None: none)."""
    if capabilities is None:
        return {}
    if hasattr(capabilities, "catalog"):
        capabilities = capabilities.catalog()
    if isinstance(capabilities, str | Path):
        capabilities = load_capabilities(Path(capabilities))
    if not isinstance(capabilities, CapabilityCatalog):
        raise ConfigError("capabilities", type(capabilities).__name__,
                          "expected a ToolRegistry, a CapabilityCatalog or a manifest path")
    return dict(capabilities.capabilities)


def argument_display(manifests: Mapping[str, CapabilityManifest], capability: str,
                     arguments: Mapping[str, Any]) -> ArgDisplay:
    """A proposal's argument display by its capability's schema (every field personal without one)."""
    manifest = manifests.get(capability)
    if manifest is None:
        return render(arguments, None)
    return render(arguments, manifest.schema_or_none(), manifest.rule_fields())


class Runfacts:
    """The process-wide client: a sender, one follower, the run-state reader."""

    def __init__(self, kafka: KafkaSettings, names: TopicNames, sender: Sender, settings: ClientSettings,
                 versions: RunVersions, keys: Callable[[], KeyView] = lambda: NO_KEYS) -> None:
        self.kafka, self.names, self.sender, self.settings = kafka, names, sender, settings
        self.versions = versions
        self.keys = keys
        """The key view that reveals sealed results and failure details (the protector's, fresh)."""
        self.actor = Actor(subjectId=settings.agent, roles=("agent",), authSource=AGENT_SOURCE)
        self.follower = Follower(kafka, FollowerSettings(names.events, names.prefix, settings.component))
        self.states = StateReader(kafka, names, ReaderSettings(component=settings.component))
        self._tx = threading.local()
        self._key: tuple[str, ...] = ()
        self.capabilities: dict[str, CapabilityManifest] = dict(load_capabilities().capabilities)
        """The manifests proposals are displayed with (`learn` adds a registry's)."""

    def learn(self, capabilities: Any) -> None:
        """Display proposals with these manifests: a `ToolRegistry`, a `CapabilityCatalog`, a path."""
        self.capabilities.update(manifests_of(capabilities))

    def display(self, capability: str, arguments: Mapping[str, Any]) -> ArgDisplay:
        """The argument display of a proposal (every field personal for a tool without a known schema)."""
        return argument_display(self.capabilities, capability, arguments)

    @classmethod
    def connect(cls, *, kafka: KafkaSettings | None = None, prefix: str | None = None,
                args_store: str | Path | None = None, outbox: str | Path | None = None, relay: bool = True,
                outbox_table: str = "runfacts_outbox", settings: ClientSettings | None = None,
                versions: RunVersions | None = None, sources: SourceKeys | None = None,
                privacy_env: Mapping[str, str] | None = None, capabilities: Any = None) -> Runfacts:
        """The process's client for these settings (the same object on every call until closed).

        `args_store`: the SQLite file or postgresql:// URL the dispatcher's `--args-store`
        reads (default $RUNFACTS_ARGS_STORE). `outbox`: a SQLite file or postgresql:// URL;
        commands become outbox rows published by a relay (this process's unless `relay=False`),
        `transaction()` joins them to your own writes, and a proposal's arguments are written
        in the same transaction as its outbox row, in the outbox's database (the dispatcher's
        `--args-store` then names that database; an `args_store` naming another is refused).
        `sources`: the keys each command is signed with for its authSource (default: this
        process's RUNFACTS_SOURCE_KEYS[_FILE]; neither: commands go unsigned).
        `privacy_env`: where RUNFACTS_PII_KEYS[_FILE] is looked up (default the environment); when
        set, personal fields are sealed before a command leaves the process (runfacts.privacy).
        `capabilities`: the tools' manifests (a `ToolRegistry`, a `CapabilityCatalog` or a manifest
        path; default the packaged one): a proposal's argument display is rendered with its tool's
        argument schema (names, units, personal fields) and never cuts what its approval rule reads.
        """
        kafka = kafka or KafkaSettings()
        names = TopicNames(prefix or kafka.topic_prefix)
        if outbox is None:
            args_store = args_store or os.environ.get(ENV_ARGS_STORE) or None
        key = (kafka.bootstrap_servers, names.prefix, str(args_store), str(outbox), outbox_table)
        with _clients_lock:
            existing = _clients.get(key)
            if existing is not None:
                existing.learn(capabilities)
                return existing
            sources = sources if sources is not None else load_source_keys_if_configured()
            protect = protector_if_configured(kafka, names.keys, privacy_env)  # seal personal fields
            sender: Sender = (DirectSender(kafka, names, args_store, sources=sources, protect=protect) if outbox is None
                              else OutboxSender(kafka, names, str(outbox), args_store, relay, outbox_table, sources,
                                                protect))
            try:
                settings = settings or ClientSettings()
                client = cls(kafka, names, sender, settings,
                             versions or connect_versions(kafka, names, settings.component),
                             protect.view if protect is not None else lambda: NO_KEYS)
            except BaseException:
                sender.close()
                raise
            client._key = key
            client.learn(capabilities)
            _clients[key] = client
            return client

    def close(self) -> None:
        """Stop the follower and the sender; the next connect makes a new client."""
        with _clients_lock:
            _clients.pop(self._key, None)
        self.follower.close()
        self.sender.close()

    def __enter__(self) -> Runfacts:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    # --- runs ------------------------------------------------------------------------------

    def start_run(self, *, goal: str, summary: str, user_id: str, tenant: str | None = None,
                  budget: BudgetAmounts | dict[str, int] | None = None, run_id: str | None = None,
                  actor: Actor | None = None) -> Run:
        """Create a run (idempotent on run_id: the same run_id again returns the same run);
        `actor`: who creates it, when not this client's agent."""
        run_id = run_id or f"run-{uuid.uuid4().hex}"
        for name, value in (("run_id", run_id), ("goal", goal), ("user_id", user_id)):
            if not isinstance(value, str) or not value.strip():
                raise BadArgument(run_id if name != "run_id" else "?", name, value, "must be a non-empty string")
        amounts = budget_amounts(run_id, "budget", budget)
        watched = self.follower.watching(run_id)
        journal = self.follower.watch(run_id, backfill=False)
        if not watched:  # watched before it exists: complete if CreateRun is accepted
            journal.complete = True
        run = Run(self, run_id, journal)
        payload = {"goalRef": goal, "goalSummary": summary, "userId": user_id, "tenant": tenant,
                   "budget": amounts, "versions": self.versions}
        try:
            run.version = self.command(run, cmd.CreateRun, payload, actor).version
        except CommandRejected as exc:
            if not watched:
                journal.complete = False  # it existed before: its earlier facts are not here
            if exc.reason != "run_exists":
                if not watched:
                    self.follower.forget(run_id)
                raise
            return self.run(run_id)
        return run

    def run(self, run_id: str) -> Run:
        """Re-attach to a run by id (its facts are read back once; RunNotFound if it has none)."""
        journal = self.follower.watch(run_id, backfill=True)
        if not journal.entries:
            self.follower.forget(run_id)
            raise RunNotFound(run_id)
        return Run(self, run_id, journal, outcomes.version_after(journal.entries, journal.entries[-1].offset))

    def open_runs(self, *, user_id: str | None = None, tenant: str | None = None,
                  agent: str | None = None) -> list[Run]:
        """Runs not ended yet (from the run-state topic), created by this agent unless `agent`
        names another; each re-attached with its facts, its `calls()` the ones still pending."""
        who = agent or self.settings.agent
        wanted = [s for s in self.states.scan().values()
                  if s.status not in TERMINAL and not s.archived and s.createdBy.subjectId == who
                  and (user_id is None or s.userId == user_id) and (tenant is None or s.tenant == tenant)]
        journals = self.follower.watch_many(s.runId for s in wanted)
        return [Run(self, s.runId, j, s.version) for s, j in zip(wanted, journals, strict=True)]

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
        state = self.states.latest(run_id)
        if state is None:
            raise RunNotFound(run_id)
        return state

    # --- commands --------------------------------------------------------------------------

    def _new(self, run_id: str, cls: type[CommandBase], payload: dict[str, Any], actor: Actor | None = None) -> Any:
        try:
            return new_command(cls, commandId=f"{run_id}:{uuid.uuid4().hex[:20]}", runId=run_id,
                               actor=actor or self.actor, issuedAt=datetime.now(UTC), correlationId=run_id,
                               payload=payload_class(cls)(**payload))
        except ValueError as exc:
            raise BadArgument(run_id, cls.__name__, payload, f"does not validate: {exc}") from exc

    def command(self, run: Run, cls: type[CommandBase], payload: dict[str, Any], actor: Actor | None = None,
                timeout: float | None = None) -> Answer:
        """Send one command for `run` and wait for the decider's answer (inside `transaction()`:
        queue it and return at once, version None)."""
        command = self._new(run.id, cls, payload, actor)
        return self.deliver(run, command, lambda: self.sender.send(command), timeout)

    def _waiter(self, run: Run, check: Callable[[Journal], Resolved | None], tail: bool = False) -> Waiter:
        """A waiter on the run's journal; a journal the follower let go (the run ended, nobody
        waited) is replaced by the run's facts read back."""
        while True:
            try:
                return self.follower.add_waiter(run.journal, check, tail)
            except Detached:
                run.journal = self.follower.watch(run.id, backfill=True)

    def deliver(self, run: Run, command: CommandBase, send: Callable[[], Any], timeout: float | None) -> Answer:
        if getattr(self._tx, "open", False):
            send()
            return Answer((), None)
        waiter = self._waiter(run, self._answer_check(command.commandId), tail=True)
        send()
        limit = self.settings.timeout_s if timeout is None else timeout
        if not waiter.done.wait(limit):
            self.follower.drop_waiter(run.journal, waiter)
            raise WaitTimeout(run.id, f"answer to {command.commandType} {command.commandId}", limit)
        last, events = waiter.resolved.unwrap()  # type: ignore[union-attr]
        error = outcomes.command_error(run.id, events)
        if error is not None:
            raise error
        return Answer(events, self._version(run.journal, last))

    def _answer_check(self, command_id: str) -> Callable[[Journal], Resolved | None]:
        def check(journal: Journal) -> Resolved | None:
            found = outcomes.command_events(journal.entries, command_id)
            if not found or self.follower.caught_up_to(journal.partition) <= found[-1].offset:
                return None
            return Resolved((found[-1].offset, tuple(e.event for e in found)))
        return check

    def _version(self, journal: Journal, offset: int) -> int:
        if not journal.complete:
            self.follower.backfill([journal])
            journal.complete = True
        return outcomes.version_after(journal.entries, offset)

    def propose(self, run: Run, capability: str, arguments: dict[str, Any], call_id: str,
                fields: dict[str, Any], actor: Actor | None = None) -> ToolCall:
        """Store the arguments (content-addressed `args-<sha256>`), send the proposal, await it."""
        digest = args_hash(arguments)
        command = self._new(run.id, cmd.ProposeToolCall, {**fields, "toolCallId": call_id,
                                                          "argsRef": f"args-{digest}", "argsHash": digest,
                                                          "display": self.display(capability, arguments)}, actor)

        def build(ref: str, stored: str) -> CommandBase:
            if (ref, stored) != (command.payload.argsRef, digest):
                raise ClientError(run.id, f"argument store returned {ref}, expected args-{digest}", call_id)
            return command

        try:
            answer = self.deliver(run, command, lambda: self.sender.propose(build, arguments), None)
        except CommandRejected as exc:
            if exc.reason != "already_proposed":
                raise
            # proposed before (a restart, the model asking again): the same call, as its latest
            # re-authorization (the journal holds the facts up to the rejection)
            return ToolCall(run, outcomes.latest_link(run.journal.entries, call_id), capability, digest, None)
        proposed = next((e.payload.toolCallId for e in answer.events if isinstance(e, ev.ToolCallProposed)), call_id)
        return ToolCall(run, proposed, capability, digest, answer.version)  # proposed anew after an expiry: <id>-r<n>

    @contextmanager
    def transaction(self) -> Iterator[Any]:
        """Outbox mode: one local transaction on the outbox's connection (yielded) for your writes
        and the commands sent meanwhile; they are queued, not awaited (methods return None)."""
        with self.sender.transaction() as conn:  # type: ignore[attr-defined]
            self._tx.open = True
            try:
                yield conn
            finally:
                self._tx.open = False

    # --- waiting ---------------------------------------------------------------------------

    def wait(self, run: Run, check: Callable[[Journal], Resolved | None], what: str, timeout: float | None,
             tool_call_id: str | None = None) -> Any:
        """Block until `check` decides on the run's facts (None: no limit)."""
        waiter = self._waiter(run, check)
        if not waiter.done.wait(timeout):
            self.follower.drop_waiter(run.journal, waiter)
            raise WaitTimeout(run.id, what, timeout or 0.0, tool_call_id, self._held(run, tool_call_id))
        return waiter.resolved.unwrap()  # type: ignore[union-attr]

    async def wait_async(self, run: Run, check: Callable[[Journal], Resolved | None], what: str,
                         timeout: float | None, tool_call_id: str | None = None) -> Any:
        """`wait`, awaitable: an asyncio future the follower resolves (no thread per wait)."""
        loop = asyncio.get_running_loop()
        while True:
            try:
                waiter = self.follower.add_waiter(run.journal, check, loop=loop)
                break
            except Detached:
                run.journal = await asyncio.to_thread(self.follower.watch, run.id, True)
        assert waiter.future is not None
        try:
            return await asyncio.wait_for(waiter.future, timeout)
        except TimeoutError:
            self.follower.drop_waiter(run.journal, waiter)
            raise WaitTimeout(run.id, what, timeout or 0.0, tool_call_id, self._held(run, tool_call_id)) from None

    @staticmethod
    def _held(run: Run, tool_call_id: str | None) -> str | None:
        """Why the call waits, when its capability is paused (its `tool.call.held`), else None."""
        return None if tool_call_id is None else outcomes.held(run.journal.entries, tool_call_id)

    def view(self, run_id: str, role: str, min_version: int | None, timeout: float | None) -> dict[str, Any]:
        """The run's `role` view once it reflects `min_version` (user: from the view topic)."""
        limit = self.settings.timeout_s if timeout is None else timeout
        deadline = time.monotonic() + limit
        while True:
            view = self._view_once(run_id, role)
            if view is not None and (min_version is None or view["version"] >= min_version):
                return view
            if time.monotonic() > deadline:
                seen = None if view is None else view["version"]
                raise WaitTimeout(run_id, f"{role} view at version >= {min_version} (latest: {seen})", limit)
            time.sleep(0.05)

    def _view_once(self, run_id: str, role: str) -> dict[str, Any] | None:
        if role == "user":
            return self.states.latest_view(run_id)
        if role not in ("operator", "auditor"):
            raise BadArgument(run_id, "role", role, "must be user, operator or auditor")
        found = user_view(self.states.latest(run_id), role)  # type: ignore[arg-type]
        return None if found is None else as_json(found)

    # --- for UIs ---------------------------------------------------------------------------

    def approvals(self, *, role: str | None = None, tenant: str | None = None,
                  personal: bool = False) -> list[Approval]:
        """Pending approvals (open, not expired), oldest first, for `role` in `tenant`, each with its
        argument display (`display_lines(a.display)`); personal values masked unless `personal`
        (a UI whose approver may see the tool's personal fields)."""
        found = approvals_of(self.states.scan().values(), role, tenant, datetime.now(UTC), personal)
        if not personal:
            return found
        view = self.keys()  # sealed personal values (privacy envelope) revealed with this process's keys
        return [replace(a, display=revealed(a.display, view)) for a in found]

    def decide(self, approval: Approval, decision: str, *, approver: str | Actor,
               timeout: float | None = None, wait: bool = True) -> int | None:
        """Approve or reject: bound to the approval's argsHash, signed with this service's key
        (RUNFACTS_APPROVAL_KEYS[_FILE]), and the decider's answer awaited (`wait=False`: sent
        only, None returned). Returns the version the decider committed."""
        now = datetime.now(UTC)
        actor, request = resume_for(approval, decision, approver, self.settings.ui.auth_source)
        token = sign_approval(request, int(now.timestamp() * 1000), environ=self.settings.ui.signing_env)
        payload = resume_payload(request, token)
        if not wait:
            self.sender.send(self._new(approval.run_id, cmd.ResumeRun, payload, actor))
            return None
        watched = self.follower.watching(approval.run_id)
        journal = self.follower.watch(approval.run_id, backfill=False)
        run = Run(self, approval.run_id, journal)
        try:
            return self.command(run, cmd.ResumeRun, payload, actor, timeout).version
        finally:
            if not watched:
                self.follower.forget(approval.run_id)

    def memory(self, scope: tuple[str, str]) -> list[memory_view.MemoryEntry]:
        """What agents may rely on in `scope` (`(tenant, "capability:<id>" | "topic:<name>")`):
        confirmed, unexpired, unrevoked memories with provenance (run, evidence, reviewer), in
        key order (run, memoryId), read from the compacted memory topic `<prefix>.memory` (written by `runfacts
        worker memory`). An entry past its expiry is not answered even before the decider's
        timer has written `memory.expired` and the projector its tombstone."""
        tenant, kind, name = memory_scope("<memory>", scope)
        found = (memory_view.decode(v) for v in self.states.scan_topic(self.states.names.memory).values())
        return memory_view.entries({memory_view.memory_key(e): e for e in found}, (tenant, kind, name),
                                   datetime.now(UTC))

    def review_memory(self, run_id: str, memory: ProposedMemory, decision: str, *, reviewer: str | Actor,
                      timeout: float | None = None) -> int | None:
        """Confirm ("approve") or reject a memory candidate as `reviewer` (role memory_reviewer,
        through the UI's auth source), bound to its hash and signed like an approval (the same
        keys). Returns the version; CommandRejected (`evidence_not_in_run`, `memory_expired`,
        `memory_already_decided`, ...) when the decider refuses the promotion."""
        actor = reviewer if isinstance(reviewer, Actor) else Actor(
            subjectId=reviewer, roles=("memory_reviewer",), tenant=memory.tenant,
            authSource=self.settings.ui.auth_source)
        request = ApprovalRequest(run_id, memory.id, memory.candidate_hash, decision, actor.subjectId)
        token = sign_approval(request, int(datetime.now(UTC).timestamp() * 1000),
                              environ=self.settings.ui.signing_env)
        payload = {"memoryId": memory.id, "decision": decision, "candidateHash": memory.candidate_hash,
                   "reviewToken": token}
        journal = self.follower.watch(run_id, backfill=False)
        return self.command(Run(self, run_id, journal), cmd.ReviewMemory, payload, actor, timeout).version

    def revoke_memory(self, run_id: str, memory: ProposedMemory, *, reviewer: str | Actor, reason: str = "",
                      timeout: float | None = None) -> int | None:
        """Withdraw a memory (or a candidate) as `reviewer` (a memory_reviewer of its tenant):
        `memory.revoke`; from then on `memory(scope)` no longer answers it. Returns the version."""
        actor = reviewer if isinstance(reviewer, Actor) else Actor(
            subjectId=reviewer, roles=("memory_reviewer",), tenant=memory.tenant,
            authSource=self.settings.ui.auth_source)
        journal = self.follower.watch(run_id, backfill=False)
        return self.command(Run(self, run_id, journal), cmd.RevokeMemory, {"memoryId": memory.id, "reason": reason},
                            actor, timeout).version


def entries_of(run: Run) -> list[Entry]:
    """The run's facts as the client holds them (log order)."""
    return list(run.journal.entries)


__all__ = ["Answer", "ClientError", "ClientSettings", "Runfacts", "connect_versions", "current_versions", "entries_of"]
