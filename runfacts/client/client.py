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
(`runfacts.processors.decider.context.DEFAULT_VERSIONS`), with a log line saying so.
"""

from __future__ import annotations

import asyncio
import importlib
import logging
import os
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from runfacts.client import outcomes
from runfacts.client.approvals import Approval, revealed
from runfacts.client.core import (
    AGENT_SOURCE,
    Answer,
    Await,
    Blocking,
    Capabilities,
    ClientCore,
    ClientSettings,
    Deliver,
    Pause,
    Step,
    argument_display,
    command_answer,
    manifests_of,
)
from runfacts.client.errors import ClientError, RunNotFound, WaitTimeout
from runfacts.client.follower import Detached, Follower, FollowerSettings, Journal, Waiter
from runfacts.client.outcomes import Entry, Resolved
from runfacts.client.output import Chunk, OutputProducer, read_output
from runfacts.client.reader import ReaderSettings, StateReader
from runfacts.client.run import Run
from runfacts.client.sender import DirectSender, OutboxSender, Sender
from runfacts.connectors.versions import published_versions
from runfacts.privacy.envelope import NO_KEYS, KeyView
from runfacts.privacy.store import protector_if_configured
from runfacts.processors.decider.context import DEFAULT_VERSIONS
from runfacts.processors.decider.state import RunState
from runfacts.processors.policy.capabilities import CapabilityManifest, load_capabilities
from runfacts.processors.policy.keyring import load_source_keys_if_configured
from runfacts.processors.policy.sources import SourceKeys
from runfacts.projections import memory as memory_view
from runfacts.projections.user_view import as_json, user_view
from runfacts.schemas.common import Actor, CommandBase, RunVersions
from runfacts.schemas.errors import ConfigError
from runfacts.settings import KafkaSettings
from runfacts.topics import TopicNames

log = logging.getLogger("runfacts.client")
ENV_VERSIONS = "RUNFACTS_RUN_VERSIONS"
ENV_ARGS_STORE = "RUNFACTS_ARGS_STORE"
ENV_TOOLS = "RUNFACTS_TOOLS"
_clients: dict[tuple[str, ...], Runfacts] = {}
_clients_lock = threading.Lock()


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


def registry_from_env(environ: Mapping[str, str] | None = None) -> Any:
    """The tool registry `$RUNFACTS_TOOLS` names (`module:attribute`, as `--tools`; `runfacts dev up
    --tools` exports it) when it is importable here, else None (logged): results stay JSON."""
    spec = (os.environ if environ is None else environ).get(ENV_TOOLS, "")
    if not spec:
        return None
    module, _, attribute = spec.partition(":")
    try:
        found = getattr(importlib.import_module(module), attribute or "registry")
    except (ImportError, AttributeError) as exc:
        log.info("$%s=%s is not importable here (%s): call.result() returns the tools' JSON values", ENV_TOOLS,
                 spec, exc)
        return None
    return found if hasattr(found, "catalog") else None


def current_versions(environ: dict[str, str] | None = None) -> RunVersions:
    """The fallback versions: $RUNFACTS_RUN_VERSIONS, else the packaged default."""
    raw = (os.environ if environ is None else environ).get(ENV_VERSIONS, "")
    if not raw:
        return DEFAULT_VERSIONS
    try:
        return RunVersions.model_validate_json(raw)
    except ValueError as exc:
        raise ConfigError(ENV_VERSIONS, raw, f"expected RunVersions JSON ({exc})") from exc


class Runfacts(ClientCore):
    """The process-wide client: a sender, one follower, the run-state reader. Its operations
    (`runfacts.client.core.ClientCore`) come in two forms: blocking, and `<name>_async`."""

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
        self.result_types: dict[str, Callable[[Any], Any]] = {}
        self._output: OutputProducer | None = None
        self._output_lock = threading.Lock()

    @classmethod
    def connect(cls, *, kafka: KafkaSettings | None = None, prefix: str | None = None,
                args_store: str | Path | None = None, outbox: str | Path | None = None, relay: bool = True,
                outbox_table: str = "runfacts_outbox", settings: ClientSettings | None = None,
                versions: RunVersions | None = None, sources: SourceKeys | None = None,
                privacy_env: Mapping[str, str] | None = None, capabilities: Capabilities = None) -> Runfacts:
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
        path; default the packaged one, and the registry $RUNFACTS_TOOLS names when importable): a
        proposal's argument display is rendered with its tool's argument schema (names, units,
        personal fields) and never cuts what its approval rule reads; a registry also types
        `call.result()` with each tool's declared return type.
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
            client.learn(registry_from_env() if capabilities is None else capabilities)
            _clients[key] = client
            return client

    def close(self) -> None:
        """Stop the follower and the sender; the next connect makes a new client."""
        with _clients_lock:
            _clients.pop(self._key, None)
        self.follower.close()
        self.sender.close()
        self.states.close()
        if self._output is not None:
            self._output.close()

    def __enter__(self) -> Runfacts:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    # --- what the operations read ----------------------------------------------------------

    def _now(self) -> datetime:
        return datetime.now(UTC)

    def _journal(self, run_id: str, backfill: bool) -> Journal:
        return self.follower.watch(run_id, backfill=backfill)

    def _watched(self, run_id: str) -> bool:
        return self.follower.watching(run_id)

    def _unwatch(self, run_id: str) -> None:
        self.follower.forget(run_id)

    def _journals(self, run_ids: Iterable[str]) -> list[Journal]:
        return self.follower.watch_many(run_ids)

    def state(self, run_id: str) -> RunState:
        """The run's latest state on the run-state topic (RunNotFound without one)."""
        state = self.states.latest(run_id)
        if state is None:
            raise RunNotFound(run_id)
        return state

    def _states(self) -> Iterable[RunState]:
        return self.states.scan().values()

    def _view_once(self, run_id: str, role: str) -> dict[str, Any] | None:
        if role == "user":
            return self.states.latest_view(run_id)
        found = user_view(self.states.latest(run_id), role)  # type: ignore[arg-type]
        return None if found is None else as_json(found)

    def _memories(self) -> Iterable[memory_view.MemoryEntry]:
        return (memory_view.decode(v) for v in self.states.scan_topic(self.states.names.memory).values())

    def _revealed(self, found: list[Approval]) -> list[Approval]:
        view = self.keys()  # sealed personal values (privacy envelope) revealed with this process's keys
        return [replace(a, display=revealed(a.display, view)) for a in found]

    # --- partial output (runfacts.client.output) ---------------------------------------------

    def _output_chunks(self, run_id: str) -> list[Chunk]:
        return read_output(self.kafka, self.names.output, run_id, self.settings.component)

    def output_producer(self) -> OutputProducer:
        """The process's producer of output chunks (one, made on first use)."""
        with self._output_lock:
            if self._output is None:
                self._output = OutputProducer(self.kafka, self.names.output)
            return self._output

    # --- carrying out a step ----------------------------------------------------------------

    def _effect(self, step: Step) -> Any:
        match step:
            case Deliver(run=None, command=command):
                self.sender.send(command)
                return Answer((), None)
            case Deliver(run=Run() as run, command=command, arguments=arguments, timeout=timeout):
                return self.deliver(run, command, self._sending(run, command, arguments), timeout)
            case Await(run=run, check=check, what=what, timeout=timeout, tool_call_id=call_id):
                return self.wait(run, check, what, timeout, call_id)
            case Blocking(call=call):
                return call()
            case Pause(seconds=seconds):
                time.sleep(seconds)
                return None
        raise TypeError(step)

    async def _effect_async(self, step: Step) -> Any:
        match step:
            case Deliver(run=Run() as run, command=command, arguments=arguments, timeout=timeout) \
                    if not getattr(self._tx, "open", False):
                return await self._deliver_async(run, command, self._sending(run, command, arguments), timeout)
            case Await(run=run, check=check, what=what, timeout=timeout, tool_call_id=call_id):
                return await self._wait_async(run, check, what, timeout, call_id)
            case Pause(seconds=seconds):
                await asyncio.sleep(seconds)
                return None
        return await asyncio.to_thread(self._effect, step)

    def _sending(self, run: Run, command: CommandBase, arguments: dict[str, Any] | None) -> Callable[[], Any]:
        if arguments is None:
            return lambda: self.sender.send(command)
        payload: Any = command.payload

        def build(ref: str, stored: str) -> CommandBase:
            if (ref, stored) != (payload.argsRef, payload.argsHash):
                raise ClientError(run.id, f"argument store returned {ref}, expected {payload.argsRef}",
                                  payload.toolCallId)
            return command
        return lambda: self.sender.propose(build, arguments)

    def _waiter(self, run: Run, check: Callable[[Journal], Resolved | None], tail: bool = False,
                loop: asyncio.AbstractEventLoop | None = None) -> Waiter:
        """A waiter on the run's journal; a journal the follower let go (the run ended, nobody
        waited) is replaced by the run's facts read back."""
        while True:
            try:
                return self.follower.add_waiter(run.journal, check, tail, loop)
            except Detached:
                run.journal = self.follower.watch(run.id, backfill=True)

    def deliver(self, run: Run, command: CommandBase, send: Callable[[], Any], timeout: float | None) -> Answer:
        """Send `command` with `send` and wait for the decider's answer (inside `transaction()`:
        queue it and return at once, version None)."""
        if getattr(self._tx, "open", False):
            send()
            return Answer((), None)
        waiter = self._waiter(run, self._answer_check(command.commandId), tail=True)
        send()
        limit = self.settings.timeout_s if timeout is None else timeout
        if not waiter.done.wait(limit):
            self.follower.drop_waiter(run.journal, waiter)
            raise WaitTimeout(run.id, f"answer to {command.commandType} {command.commandId}", limit)
        return self._answer(run, command, waiter.resolved.unwrap())  # type: ignore[union-attr]

    async def _deliver_async(self, run: Run, command: CommandBase, send: Callable[[], Any],
                            timeout: float | None) -> Answer:
        """`deliver`, awaitable: sent from a worker thread, the answer an asyncio future the
        follower resolves."""
        waiter = await asyncio.to_thread(self._waiter, run, self._answer_check(command.commandId), True,
                                         asyncio.get_running_loop())
        assert waiter.future is not None
        await asyncio.to_thread(send)
        limit = self.settings.timeout_s if timeout is None else timeout
        try:
            found = await asyncio.wait_for(waiter.future, limit)
        except TimeoutError:
            self.follower.drop_waiter(run.journal, waiter)
            raise WaitTimeout(run.id, f"answer to {command.commandType} {command.commandId}", limit) from None
        if not run.journal.complete:  # the version needs the run from its start: read it back
            await asyncio.to_thread(self._version, run.journal, found[0])
        return self._answer(run, command, found)

    def _answer(self, run: Run, command: CommandBase, found: tuple[int, tuple[Any, ...]]) -> Answer:
        last, events = found
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

    def wait(self, run: Run, check: Callable[[Journal], Resolved | None], what: str, timeout: float | None,
             tool_call_id: str | None = None) -> Any:
        """Block until `check` decides on the run's facts (None: no limit)."""
        waiter = self._waiter(run, check)
        if not waiter.done.wait(timeout):
            self.follower.drop_waiter(run.journal, waiter)
            raise WaitTimeout(run.id, what, timeout or 0.0, tool_call_id, self._held(run, tool_call_id))
        return waiter.resolved.unwrap()  # type: ignore[union-attr]

    async def _wait_async(self, run: Run, check: Callable[[Journal], Resolved | None], what: str,
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


def entries_of(run: Run) -> list[Entry]:
    """The run's facts as the client holds them (log order)."""
    return list(run.journal.entries)


__all__ = ["ENV_TOOLS", "Answer", "ClientError", "ClientSettings", "Runfacts", "argument_display", "command_answer",
           "connect_versions", "current_versions", "entries_of", "manifests_of", "registry_from_env"]
