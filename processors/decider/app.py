"""The run decider on the engine: commands topic -> events + run state + views, exactly once.

Per command record (all in the engine's transaction for the batch):
1. The command was decoded and validated by the codec; bad bytes, records or fields over the
   `InputLimits` (before they can reach any run's state; docs/security.md) and `timer.fire` (internal:
   a forged one could expire approvals) go to the dead-letter topic with the reason in headers.
   With source keys (`sources`), a record whose signature does not verify against the key of
   the `authSource` its command claims (`policy.sources.check_source`, judged at the broker's
   receive time) is dead-lettered too, with `dlq.reason` = `source_signature_missing` |
   `source_signature_invalid` | `source_key_unknown` | `source_key_retired`: before the policy
   and before it can touch a run (no event, no seen commandId a forger could squat).
   One writer per run (docs/semantics.md, "One writer per run"): a command whose ids,
   references or amounts are outside the contract (`runfacts.ids`: `dlq.reason` = `invalid_id` |
   `invalid_ref` | `negative_amount`), whose key is not its runId (`key_mismatch`) or that sits
   on a partition other than its run's (murmur2 of the runId, `wrong_partition`) is
   dead-lettered before anything else, so no other task ever decides a run.
2. Commands for runs that never existed are deduplicated by commandId in `orphans`.
3. Load the run's state: as an earlier command of this batch left it, else from the `runs`
   store (None: no run yet).
4. `decide` (pure) -> events; `fold` -> the new state. A command that starts new work
   (`GROWS`) and would take the run's state JSON past `InputLimits.max_state_bytes` is
   dead-lettered instead, never decided: the state record must stay under the broker's
   1 MB message limit, and results, controls and timers still get through to end the run.
5. Emit each event to the events topic (key runId, Avro single-object bytes, type headers).
5b. Cross-run commands the facts call for (`children.outbox`: a child to create, a report to a
   parent, a cancellation to a child; docs/decisions/0012-child-runs.md) go to the commands
   topic keyed by their runId (murmur2: the target run's partition), in the same transaction.
6. If the state changed: keep it in the batch (`ctx.batch`). As the engine commits the batch,
   `flush` stores each changed run's last state once in `runs`, whose changelog IS the
   run-state topic (`Application.changelogs`: the engine produces the put there, with the
   state's headers, once), and emits every view to its topic (a run's intermediate states within one batch are never
   published: the compacted topics would drop them anyway).
7. Re-plan timers from the new state (approval expiry, reconciliation deadline, wall budget);
   a due timer becomes a `timer.fire` command through the same steps.
The engine commits outputs, store changelogs and input offsets atomically, so events, state
and views never disagree. Events are encoded by compiled Avro writers and commands read by
compiled readers (`decider_codec`, byte-identical to the codec); the state's JSON reuses the
unchanged tool calls' and approvals' JSON (`state_json`, identical to `model_dump_json`).

Telemetry (only when enabled; the pure decider knows nothing of it): one span per command,
child of the trace context in the command's headers; its `traceparent` goes on every event,
state and view record the command produced; counters for commands, retries, policy denials.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from functools import lru_cache
from typing import Any, NamedTuple, cast

from pydantic import BaseModel

from runfacts import telemetry
from runfacts.ids import violation
from runfacts.partitioning import misplaced_run_record
from runfacts.processors.decider.codec import DeciderCodec, Extent
from runfacts.processors.decider.commands.children import XRUN_SOURCE, outbox
from runfacts.processors.decider.commands.tools import ATTEMPT_SLOTS
from runfacts.processors.decider.core import DecideContext, decide_evolve
from runfacts.processors.decider.state import RunState
from runfacts.processors.decider.state_json import Parts, dump_state, lacks_evidence, load_state, with_evidence
from runfacts.processors.decider.timers import TimerSpec, wanted_timers
from runfacts.processors.engine.api import Application, Context, Record, Source, Timer
from runfacts.processors.policy.sources import SourceKeys, check_source, sign
from runfacts.schemas import commands as cmd
from runfacts.schemas import events as ev
from runfacts.schemas.codec import Codec, CodecSettings
from runfacts.schemas.common import Actor, CommandBase, EventBase, TimerKind
from runfacts.schemas.errors import InvalidInput
from runfacts.schemas.models import schema_name
from runfacts.topics import TopicNames

APP_NAME = "runfacts-run-decider"
GROWS = frozenset({cmd.ProposeToolCall, cmd.StartTurn, cmd.RecordReasoning, cmd.UpdateProgress,
                   cmd.RecordFeedback, cmd.SaveCheckpoint})
"""Commands that start new work or add data; only these are held to `max_state_bytes`."""
GROWTH_PER_BYTE = 40
"""How much state JSON one byte of a command can become, at most: a text may be JSON-escaped to
6 bytes a byte (control characters) and is kept up to five times (e.g. a toolCallId: the map
key, its field, the approval's id, key and field)."""
GROWTH_FIXED = 16 * 1024
"""What a command adds regardless of its size, at most (new entries' field names, timestamps,
derived ids and hashes)."""
TIMER_ACTOR = Actor(subjectId="run-decider", roles=("decider",), authSource="decider-timer")


CONTROL_EVENTS = frozenset({"tool.paused", "tool.resumed"})
"""Facts the shell also writes to `<prefix>.tools.control` (key capabilityId, compacted): the last
pause or resume of each capability, which every dispatcher reads whole (docs/dispatcher.md)."""


def timer_command(run_id: str, timer_id: str, due_ms: int, kind: str, target: str) -> cmd.FireTimer:
    """The `timer.fire` command a due timer becomes (its commandId `timer:<id>:<due ms>` is the
    causationId of what it decides; the crash oracle rebuilds fires from it)."""
    at = datetime.fromtimestamp(due_ms / 1000, tz=UTC)
    return cmd.FireTimer(
        commandId=f"timer:{timer_id}:{due_ms}", runId=run_id, actor=TIMER_ACTOR, issuedAt=at,
        correlationId=f"timer:{timer_id}",
        payload=cmd.FireTimerPayload(timerId=timer_id, kind=cast(TimerKind, kind),  # pydantic checks it
                                     targetId=target, dueAt=at))


ViewFn = Callable[[RunState], Iterable[tuple[str, bytes, bytes | None]]]
CACHE_SIZE = 10_000  # parsed run states kept at most; the stored bytes decide whether one is current
CACHE_BYTES = 8 << 20
"""...and at most this many bytes of the stored JSON they were parsed from: a parsed state takes
about five times its JSON in memory (measured: 12.8 KB for a 2.3 KB state with one approved
call), so 10,000 states of runs with a few calls held ~130 MB; bounded by bytes, ~40 MB."""


class Pending(NamedTuple):
    """A run this batch changed (`ctx.batch[key]`): its last state, the trace headers for its
    outputs, the state's JSON if the size check measured it (reused by `flush`), and an upper
    bound of that JSON's size (`_size_bound`)."""

    state: RunState
    trace: list[tuple[str, bytes]] | None
    dumped: tuple[bytes, dict[str, Parts]] | None
    size_bound: int


class Cached(NamedTuple):
    """A run's stored state bytes, the state they hold and their reusable JSON parts."""

    raw: bytes
    state: RunState
    parts: dict[str, Parts]


class StateCache:
    """Parsed run states by store key, oldest put first out, bounded by count and by the bytes
    of stored JSON they came from (a run with a large state takes more room than a new one)."""

    __slots__ = ("_entries", "_bytes", "max_bytes", "max_entries")

    def __init__(self, max_bytes: int = CACHE_BYTES, max_entries: int = CACHE_SIZE) -> None:
        self._entries: dict[bytes, Cached] = {}
        self._bytes = 0
        self.max_bytes, self.max_entries = max_bytes, max_entries

    def get(self, key: bytes) -> Cached | None:
        return self._entries.get(key)

    def put(self, key: bytes, entry: Cached) -> list[bytes]:
        """Keep `entry` for `key`; returns the keys evicted to make room."""
        entries = self._entries
        old = entries.pop(key, None)
        if old is not None:
            self._bytes -= len(old.raw)
        evicted = []
        while entries and (len(entries) >= self.max_entries or self._bytes + len(entry.raw) > self.max_bytes):
            gone = next(iter(entries))
            self._bytes -= len(entries.pop(gone).raw)
            evicted.append(gone)
        entries[key] = entry
        self._bytes += len(entry.raw)
        return evicted

    def __len__(self) -> int:
        return len(self._entries)

    @property
    def bytes(self) -> int:
        """The stored JSON bytes the kept states came from."""
        return self._bytes


@dataclass(frozen=True)
class InputLimits:
    """The largest command the shell accepts; anything bigger is dead-lettered, never decided.
    `max_state_bytes`: the largest run state (JSON) a command that starts new work may leave."""

    max_record_bytes: int = 64 * 1024
    max_text_chars: int = 4_096
    max_items: int = 256
    max_state_bytes: int = 512 * 1024

    def within(self, extent: Extent | None) -> bool:
        """True when a record of this `Extent` cannot be over a limit (None: unknown)."""
        return extent is not None and extent.text_bytes <= self.max_text_chars and extent.items <= self.max_items

    def check(self, command: BaseModel) -> str | None:
        """The first field over a limit, as a readable reason (None: within the limits).

        A report's `result` is bounded by the record limit only: the dispatcher caps it
        (RUNFACTS_TOOL_RESULT_MAX_BYTES, 16 KiB), sealing makes it about a third longer, and the
        state keeps only its `resultRef`; a side effect that happened must be recorded."""
        if _fits(command, self):
            return None
        if isinstance(command, RESULT_REPORTS) and command.payload.result is not None:
            command = command.model_copy(update={"payload": command.payload.model_copy(update={"result": None})})
            if _fits(command, self):
                return None
        return _oversized(command, "", self)


RESULT_REPORTS = (cmd.ReportToolCompleted, cmd.ReportReconciled)
"""The reports that carry a tool's result value."""


def _fits(value: BaseModel, limits: InputLimits) -> bool:
    """True exactly when `_oversized(value)` finds nothing (the fast pass of `check`)."""
    max_chars, max_items = limits.max_text_chars, limits.max_items
    for item in value.__dict__.values():
        kind = type(item)
        if kind is str:
            if len(item) > max_chars:
                return False
        elif kind is tuple or kind is list:
            if len(item) > max_items:
                return False
            for sub in item:
                if (len(sub) > max_chars) if type(sub) is str else not _fits_any(sub, limits):
                    return False
        elif kind not in _SCALARS and not _fits_any(item, limits):
            return False
    return True


def _fits_any(value: Any, limits: InputLimits) -> bool:
    if isinstance(value, BaseModel):
        return _fits(value, limits)
    return _oversized(value, "", limits) is None


_SCALARS = frozenset({int, bool, float, type(None), datetime})


def _oversized(value: Any, path: str, limits: InputLimits) -> str | None:
    if isinstance(value, str):
        if len(value) > limits.max_text_chars:
            return f"field {path} has {len(value)} characters (limit {limits.max_text_chars})"
        return None
    if isinstance(value, BaseModel):
        items: Iterable[tuple[str, Any]] = ((f"{path}.{k}" if path else k, v) for k, v in value.__dict__.items())
    elif isinstance(value, tuple | list):
        if len(value) > limits.max_items:
            return f"field {path} has {len(value)} items (limit {limits.max_items})"
        items = ((f"{path}[{i}]", v) for i, v in enumerate(value))
    else:
        return None
    for sub_path, sub in items:
        found = _oversized(sub, sub_path, limits)
        if found is not None:
            return found
    return None


def effective_command(command: CommandBase, received_ms: int, max_backdate_ms: int) -> CommandBase:
    """A command judged at the time the broker received it, when that is later than issuedAt.

    The commands topic uses LogAppendTime, so the record timestamp is the broker's clock:
    a sender cannot back-date `issuedAt` to slip an approval in before its expiry.
    """
    issued_ms = int(command.issuedAt.timestamp() * 1000)
    if received_ms - issued_ms <= max_backdate_ms:
        return command
    received = datetime.fromtimestamp(received_ms / 1000, tz=UTC)
    return command.model_copy(update={"issuedAt": received})


DISPATCHER_KEY = b"\x00dispatcher"
"""In `orphans` (no orphan key starts with NUL): the incarnation of the partition's dispatcher,
the last `claimant`. In the store, so it is restored with the partition and rolls back with
an aborted batch: the events stay a function of the committed commands (the crash oracle
replays the same rule)."""


def claimant(command: CommandBase, events: list[EventBase]) -> int | None:
    """The incarnation a claim shows to be the partition's dispatcher, or None: an accepted
    claim, or one whose epoch is behind the call's (a dispatcher with an older incarnation took
    the partition over: the calls authorized from now on carry ITS lease, ADR 0011)."""
    if not isinstance(command, cmd.ClaimToolCall) or not events:
        return None
    first = events[0]
    if isinstance(first, ev.ToolCallDispatching) or (
            isinstance(first, ev.CommandRejected) and first.payload.reasonCode == "stale_lease"):
        return command.payload.leaseEpoch // ATTEMPT_SLOTS
    return None


@dataclass(frozen=True)
class DeciderShell:
    """The decider's wiring: topic names, the pure context, the codec and view publishers."""

    names: TopicNames
    ctx: DecideContext
    codec: Codec = field(default_factory=lambda: Codec(CodecSettings(validate=True)))
    views: tuple[ViewFn, ...] = ()
    max_backdate_ms: int = 5_000
    limits: InputLimits = InputLimits()
    sources: SourceKeys | None = None
    """Every trusted source's verification keys: commands must be signed (None: not checked)."""
    cache: StateCache = field(default_factory=StateCache, compare=False, repr=False)
    timer_memo: dict[bytes, tuple[RunState | None, dict[str, TimerSpec]]] = field(
        default_factory=dict, compare=False, repr=False)
    telemetry: telemetry.Telemetry = field(default_factory=telemetry.current)
    history: Callable[[str], Iterable[tuple[str, str]]] | None = None
    """A run's (eventId, eventType) in log order (`history.EventHistory`): rebuilds the evidence of
    a state stored before the run kept it (`state_json.lacks_evidence`). None: not rebuilt."""
    dispatch_at_once: bool = True
    """ADR 0011: an authorization carries the lease of the partition's known dispatcher (False:
    every call is claimed, e.g. while dispatchers older than ADR 0011 still run;
    RUNFACTS_DISPATCH_AT_ONCE=false)."""
    fast: DeciderCodec = field(init=False, compare=False, repr=False)
    leases: dict[int, DecideContext] = field(default_factory=dict, compare=False, repr=False)
    """`ctx` with `dispatcher_incarnation` set, per incarnation (built once)."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "fast", DeciderCodec(self.codec))

    def deserialize(self, data: bytes | None, headers: list[tuple[str, bytes]] | None = None) -> CommandBase:
        """The command in `data`, within the limits; InvalidInput (a dead letter) otherwise."""
        if data is None:
            raise InvalidInput("empty command (tombstone)", schema="runfacts.commands")
        if len(data) > self.limits.max_record_bytes:
            raise InvalidInput(f"oversized: record of {len(data)} bytes (limit {self.limits.max_record_bytes})",
                               schema="runfacts.commands")
        value, extent = self.fast.decode_sized(data, headers=headers)
        if not isinstance(value, CommandBase):
            raise InvalidInput(f"{value.eventType} is an event, not a command", schema=schema_name(value))
        if isinstance(value, cmd.FireTimer):  # only on_timer makes these, in-process
            raise InvalidInput("timer.fire is internal to the run decider: it fires its own timers and never "
                               "accepts one from the commands topic", schema=schema_name(value),
                               version=value.schemaVersion)
        too_big = None if self.limits.within(extent) else self.limits.check(value)
        if too_big is not None:
            raise InvalidInput(f"oversized: {too_big}", schema=schema_name(value), version=value.schemaVersion)
        outside = violation(value)
        if outside is not None:  # ids, references, amounts (runfacts.ids): before it can reach a run
            raise InvalidInput(f"{value.commandType}: {outside}", schema=schema_name(value),
                               version=value.schemaVersion, reason=outside.reason)
        return value

    def process(self, record: Record, ctx: Context) -> None:
        command: CommandBase = record.value
        misplaced = misplaced_run_record(record.key, record.partition, ctx.partitions, command.runId,
                                         schema_name(command), command.schemaVersion, "command")
        if misplaced is not None:  # one writer per run: only the task of the run's partition decides it
            ctx.dead_letter(misplaced)
            return
        if self.sources is not None:
            refused = check_source(self.sources, command.actor.authSource, record.message.value(), record.headers,
                                   record.timestamp_ms)
            if refused is not None:
                ctx.dead_letter(InvalidInput(str(refused), schema=schema_name(command),
                                             version=command.schemaVersion, reason=refused.reason))
                if self.telemetry.enabled:
                    self.telemetry.add(telemetry.POLICY_DENIALS, 1, {"reasonCode": refused.reason,
                                                                     "commandType": command.commandType})
                return
        command = effective_command(command, record.timestamp_ms, self.max_backdate_ms)
        tel = self.telemetry
        if not tel.enabled:
            self.handle(command, ctx)
            return
        with tel.span(f"run-decider handle {command.commandType}", parent=record.headers,
                      attributes=_span_attributes(command)) as span:
            self.handle(command, ctx, span.headers())

    def on_timer(self, timer: Timer, ctx: Context) -> None:
        kind, _, target = timer.payload.decode().partition("|")
        self.handle(timer_command(timer.key.decode(), timer.timer_id, timer.due_ms, kind, target), ctx)

    def handle(self, command: CommandBase, ctx: Context, trace: list[tuple[str, bytes]] | None = None) -> None:
        """Steps 2-7 of the module docstring for one command (`trace`: headers for its outputs)."""
        key = command.runId.encode()
        state = self._current(key, ctx)
        if state is None and self._orphan_seen(command, ctx):
            return
        base = self._context_for(command, ctx)
        decide_ctx = self._with_dispatcher(ctx, base) if self.dispatch_at_once else base
        events, new = decide_evolve(command, state, decide_ctx)
        if isinstance(command, cmd.DrainVersion) and events and isinstance(events[0], ev.VersionDrained):
            self._note_drain(events[0], ctx)
        learned = claimant(command, events) if self.dispatch_at_once else None
        if learned is not None and learned != decide_ctx.dispatcher_incarnation:
            ctx.store("orphans").put(DISPATCHER_KEY, str(learned).encode())
        dumped, bound = None, 0
        if new is not None and new is not state:
            bound = self._size_bound(key, ctx)
            if type(command) in GROWS and bound > self.limits.max_state_bytes:
                dumped = self._dump(key, new)  # might not fit: measure
                if len(dumped[0]) > self.limits.max_state_bytes:
                    self._refuse_growth(command, len(dumped[0]), ctx)
                    return
                bound = len(dumped[0])
        if new is None:
            self._mark_orphan(command, ctx)
        for event in events:
            self._emit_event(event, ctx, trace)
        for out in outbox(command, state, events, new):  # cross-run commands: same transaction as the facts
            value = self.codec.encode(out)
            ctx.emit(self.names.commands, out.runId.encode(), value, self._xrun_headers(out, value) + (trace or []))
        if new is not None and new is not state:
            ctx.batch[key] = Pending(new, trace, dumped, bound)  # step 6 runs once per run and batch: see flush
        self._plan_timers(key, state, new, ctx)
        if self.telemetry.enabled:
            _count(self.telemetry, command, events)

    def _xrun_headers(self, command: CommandBase, value: bytes) -> list[tuple[str, bytes]]:
        """A cross-run command's headers, signed as `decider-xrun` when this decider holds that
        source's key (with source keys but without it, the receiver dead-letters the command as
        `source_signature_missing`: add a `decider-xrun` key to RUNFACTS_SOURCE_KEYS)."""
        headers = list(self.codec.headers(command))
        sources = self.sources
        if sources is not None and XRUN_SOURCE in sources.keyrings and sources.keyrings[XRUN_SOURCE].current:
            headers += sign(sources, XRUN_SOURCE, value)
        return headers

    def _with_dispatcher(self, ctx: Context, base: DecideContext) -> DecideContext:
        """`self.ctx` with the partition's dispatcher as the store remembers it (ADR 0011); `base`
        as it is when it is another context (a `run.create` with drained versions dispatches nothing)."""
        if base is not self.ctx:
            return base
        raw = ctx.store("orphans").get(DISPATCHER_KEY)
        return self.context_for(None if raw is None else int(raw))

    def context_for(self, incarnation: int | None) -> DecideContext:
        """`self.ctx` knowing the partition's dispatcher `incarnation` (None: unknown)."""
        if incarnation is None:
            return self.ctx
        known = self.leases.get(incarnation)
        if known is None:
            known = self.leases[incarnation] = replace(self.ctx, dispatcher_incarnation=incarnation)
        return known

    def flush(self, ctx: Context) -> None:
        """Step 6 for every run the batch changed: its last state, stored and published once."""
        for key, pending in ctx.batch.items():
            self._save(key, pending.state, ctx, pending.trace, pending.dumped)

    def _current(self, key: bytes, ctx: Context) -> RunState | None:
        """The run's state: as this batch left it, else as stored."""
        pending = ctx.batch.get(key)
        if pending is not None:
            return pending.state  # type: ignore[no-any-return]
        return self._load(key, ctx.store("runs").get(key))

    def _load(self, key: bytes, raw: bytes | None) -> RunState | None:
        """The stored state; parsed once and cached while the stored bytes stay the same."""
        if raw is None:
            return None
        cached = self.cache.get(key)
        if cached is not None and cached[0] == raw:
            return cached[1]
        state = load_state(raw)
        if self.history is not None and lacks_evidence(raw):
            state = with_evidence(state, self.history(state.runId))
        self._remember(key, Cached(raw, state, {}))
        return state

    def _remember(self, key: bytes, entry: Cached) -> None:
        for gone in self.cache.put(key, entry):
            self.timer_memo.pop(gone, None)  # a memo must not keep an evicted state alive

    def _context_for(self, command: CommandBase, ctx: Context) -> DecideContext:
        """The decide context; for `run.create`, with the versions this partition drained."""
        if not isinstance(command, cmd.CreateRun):
            return self.ctx
        drained = _drained(ctx.store("orphans").get(DRAINED_KEY))
        return replace(self.ctx, drained=drained) if drained else self.ctx

    @staticmethod
    def _note_drain(event: ev.VersionDrained, ctx: Context) -> None:
        """The partition's drained set after `event` (in the same transaction as the fact)."""
        store = ctx.store("orphans")
        drained = set(_drained(store.get(DRAINED_KEY)))
        pair = (event.payload.dimension, event.payload.version)
        if event.payload.undo:
            drained.discard(pair)
        else:
            drained.add(pair)
        store.put(DRAINED_KEY, json.dumps(sorted(drained)).encode())

    @staticmethod
    def _orphan_key(command: CommandBase) -> bytes:
        return f"{command.runId}\x00{command.commandId}".encode()

    def _orphan_seen(self, command: CommandBase, ctx: Context) -> bool:
        """A command already rejected for a run that does not exist (a redelivery)."""
        return ctx.store("orphans").get(self._orphan_key(command)) is not None

    def _mark_orphan(self, command: CommandBase, ctx: Context) -> None:
        ctx.store("orphans").put(self._orphan_key(command), b"1")

    def _emit_event(self, event: EventBase, ctx: Context, trace: list[tuple[str, bytes]] | None) -> None:
        fast = self.fast
        headers = fast.headers(event)
        value = fast.encode(event)
        ctx.emit(self.names.events, event.runId.encode(), value, headers + trace if trace else headers)
        if event.eventType in CONTROL_EVENTS and event.capabilityId:  # the fleet's pause board, same transaction
            ctx.emit(self.names.tool_control, event.capabilityId.encode(), value, headers)

    def _size_bound(self, key: bytes, ctx: Context) -> int:
        """An upper bound of the run's state JSON after the current command: the last known size
        (or bound, within this batch) plus GROWTH_PER_BYTE per byte of the command's record and
        GROWTH_FIXED. Only a bound over the limit costs a real measurement (`_dump`)."""
        pending = ctx.batch.get(key)
        cached = self.cache.get(key)
        known = pending.size_bound if pending is not None else (len(cached.raw) if cached is not None else 0)
        record = ctx.record
        size = len(record.message.value() or b"") if record is not None else 0  # timers: tiny, internal
        return int(known + GROWTH_PER_BYTE * size + GROWTH_FIXED)

    def _dump(self, key: bytes, state: RunState) -> tuple[bytes, dict[str, Parts]]:
        cached = self.cache.get(key)
        return dump_state(state, cached.parts if cached is not None else None)

    def _refuse_growth(self, command: CommandBase, size: int, ctx: Context) -> None:
        """Step 4's state limit: the command goes to the dead-letter topic, the run stays as it was."""
        ctx.dead_letter(InvalidInput(f"run state would grow to {size} bytes (limit {self.limits.max_state_bytes}): "
                                     f"{command.commandType} not decided; stop, complete or archive the run",
                                     schema=schema_name(command), version=command.schemaVersion))

    def _save(self, key: bytes, state: RunState, ctx: Context, trace: list[tuple[str, bytes]] | None,
              dumped: tuple[bytes, dict[str, Parts]] | None = None) -> None:
        body, parts = dumped if dumped is not None else self._dump(key, state)
        headers = [("contentType", b"application/json"), ("version", str(state.version).encode())]
        # The store's changelog IS the run-state topic (Application.changelogs): this put is the
        # run.state record, produced once by the engine at commit with these headers.
        ctx.put("runs", key, body, headers + trace if trace else headers)
        self._remember(key, Cached(body, state, parts))
        for view in self.views:
            for topic, view_key, value in view(state):
                ctx.emit(topic, view_key, value, trace or None)

    def _plan_timers(self, key: bytes, old: RunState | None, new: RunState | None, ctx: Context) -> None:
        if new is old:
            return
        memo = self.timer_memo
        known = memo.get(key)
        catalog = self.ctx.capabilities
        before = known[1] if known is not None and known[0] is old else wanted_timers(old, catalog)
        after = wanted_timers(new, catalog)
        if len(memo) >= CACHE_SIZE and key not in memo:
            memo.pop(next(iter(memo)))
        memo[key] = (new, after)  # the next command's `before`
        if not before and not after:
            return
        for timer_id in before.keys() - after.keys():
            ctx.cancel(key, timer_id)
        for timer_id, spec in after.items():
            if before.get(timer_id) != spec:
                due_ms = int(spec.due.timestamp() * 1000)
                ctx.schedule(key, due_ms, timer_id, f"{spec.kind}|{spec.target_id}".encode())

    @property
    def app_name(self) -> str:
        """The engine application (and consumer group) name."""
        return APP_NAME if self.names.prefix == "runfacts" else f"{self.names.prefix}-run-decider"

    def application(self) -> Application:
        """The engine application for this shell."""
        return Application(
            name=self.app_name,
            sources=(Source(self.names.commands, value_deserializer=self.deserialize, value_headers=True),),
            process=self.process, on_timer=self.on_timer, stores=("runs", "orphans"),
            dead_letter_topic=self.names.dlq, flush=self.flush, metrics_topic=self.names.metrics,
            changelogs={"runs": self.names.state},
        )


DRAINED_KEY = b"\x00drained"
"""Under this key the `orphans` store holds the partition's drained versions (JSON [[dimension,
version], ...]); no orphan key starts with NUL (they are `<runId>\x00<commandId>`)."""


@lru_cache(maxsize=64)
def _drained(raw: bytes | None) -> frozenset[tuple[str, str]]:
    return frozenset() if raw is None else frozenset((d, v) for d, v in json.loads(raw))


def _span_attributes(command: CommandBase) -> dict[str, str]:
    return {"runfacts.run_id": command.runId, "runfacts.command_id": command.commandId,
            "runfacts.command_type": command.commandType, "runfacts.correlation_id": command.correlationId,
            "runfacts.causation_id": command.causationId or ""}


def _count(tel: telemetry.Telemetry, command: CommandBase, events: list[EventBase]) -> None:
    """Commands handled (by outcome), retries requested, policy denials."""
    rejected = next((e for e in events if e.eventType == "command.rejected"), None)
    outcome = "duplicate" if not events else ("rejected" if rejected is not None else "accepted")
    tel.add(telemetry.COMMANDS_HANDLED, 1, {"commandType": command.commandType, "outcome": outcome})
    if any(e.eventType == "tool.call.retry_requested" for e in events):
        tel.add(telemetry.RETRIES, 1, {"source": "command"})
    reason = getattr(getattr(rejected, "payload", None), "reasonCode", None)
    if reason in telemetry.POLICY_REASONS:
        tel.add(telemetry.POLICY_DENIALS, 1, {"reasonCode": reason, "commandType": command.commandType})
