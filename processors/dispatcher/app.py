"""The tool dispatcher on the engine: events topic -> tool calls -> commands, exactly once.

Per event record (all in the engine's transaction for the batch):
1. Decode the event (bad bytes -> dead-letter topic). An event whose key is not its runId
   (`dlq.reason` `key_mismatch`) or on a partition other than its run's (`wrong_partition`)
   is dead-lettered: only one task folds a run.
2. Fold it into the run's state with the run decider's own `evolve` (store `runs`); an event
   that cannot follow the state (`CorruptLog`, `unfoldable_event`) is dead-lettered and the
   partition goes on: a poison record never stops every run of its partition.
3. `work_for` (pure) says what the event asks: claim, execute, report a lost outcome,
   reconcile, verify, cancel, or forget a settled call.
4. I/O happens only here: the adapter call, lookups and cancels. With a `ToolPool` (the
   packaged worker) the call leaves the transaction: the `dispatching` event starts it on
   the pool and commits; its `done:<toolCallId>` timer collects the outcome in a later
   transaction. Without one the call runs inline (bounded by its connect/read timeouts).
   Outcomes become commands through the pure `after_*` functions.
5. Every finding is a command to the commands topic (key runId, deterministic commandId
   from the input position): the run decider validates it. With privacy keys (`seal`, the
   port `SealPersonal`) its personal fields (the tool's result, error texts) are sealed
   for the run's data subject, its `userId` in the `runs` store, before it is encoded and
   signed. The dispatcher never writes events. Follow-ups (a retry, the next lookup, the
   next verification poll) are engine timers, so no call ever sleeps inside a transaction.
The engine commits commands, the `runs`/`progress` stores and the input offset atomically.
A call of a capability without an adapter raises `UnservedCapability` at step 3: the engine
stops on that record without committing past it (docs/dispatcher.md, "Unserved capabilities").
Telemetry (only when enabled): one span per event the dispatcher acts on, child of the trace
context in the event's headers (the run decider's span); its `traceparent` goes on every
command it sends for that event, so command -> event -> dispatch -> command is one trace.
Crash points: `dispatcher.after_call_before_record` (the tool answered, nothing recorded)
and `dispatcher.after_record_before_commit` (commands produced, not committed). Either way
the `dispatching` event (inline) or the `done:` timer (pooled) is read again by the next
incarnation, whose epochs differ: it reports `result_unknown` and reconciles; it never
calls again blindly, except a call of a read-only or idempotent capability (manifest
`readOnly` / `idempotent`), which it simply runs again (core invariant 5). Inline calls
are sequential per engine instance, so keep `consume_batch x (connect + read timeout)`
below `transaction_timeout_ms`; pooled calls have no such bound.
"""

from __future__ import annotations

import logging
import os
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping
from concurrent.futures import wait
from dataclasses import dataclass, field
from datetime import UTC, datetime

from runfacts import telemetry as telemetry_hooks
from runfacts.crashpoints import crash_point
from runfacts.partitioning import misplaced_run_record
from runfacts.processors.decider.evolve import CorruptLog, evolve
from runfacts.processors.decider.state import RunState, ToolCallState
from runfacts.processors.decider.state_json import Parts, dump_state, load_state
from runfacts.processors.dispatcher import core
from runfacts.processors.dispatcher.adapters import (
    ArgsMissing,
    ArgsReader,
    ArgsTampered,
    Pause,
    PauseBoard,
    SealPersonal,
    ToolAdapter,
    ToolOutcome,
    ToolRequest,
    ToolUnknown,
)
from runfacts.processors.dispatcher.pool import ToolPool
from runfacts.processors.engine.api import Application, Context, Record, Source, Timer
from runfacts.processors.policy.capabilities import CapabilityCatalog
from runfacts.processors.policy.compensation import inline_arguments
from runfacts.processors.policy.sources import SourceKeys, require_signing_key, sign
from runfacts.schemas.codec import Codec, CodecSettings
from runfacts.schemas.common import Actor, EventBase
from runfacts.schemas.errors import ConfigError, InvalidInput
from runfacts.schemas.models import decode_event, new_command, schema_name
from runfacts.topics import TopicNames

log = logging.getLogger("runfacts.dispatcher")
MEMO_SIZE = 10_000
UNFOLDABLE = "unfoldable_event"
"""`dlq.reason` of an event that cannot follow the run's state (`CorruptLog`): e.g. a second
`run.created` a foreign producer wrote into a run's partition."""


class UnservedCapability(ConfigError):
    """A call of a capability this dispatcher has no adapter for. The member of the consumer
    group that owns a partition is the only one that ever reads it, so "leave it to another
    dispatcher" would lose the call: the dispatcher stops on the record instead (the engine
    aborts the transaction, nothing is committed past it) and a restart with the adapter
    resumes from it. The decider's claim deadline moves the run to needs_review meanwhile."""

    def __init__(self, capability_id: str, run_id: str, tool_call_id: str, served: list[str]) -> None:
        super().__init__("dispatcher adapters", capability_id,
                         f"no adapter for capability {capability_id} (call {run_id}/{tool_call_id}); "
                         f"this dispatcher serves {', '.join(served) or 'nothing'}: stopped without "
                         f"committing past the call; add an adapter for {capability_id} or remove it "
                         "from the capability manifest, then restart")


STATE_CACHE_RUNS = 1_000
STATE_CACHE_BYTES = 32 * 1024 * 1024
"""The parsed run states the dispatcher keeps (`DispatcherShell._load`): at most this many runs
and this many bytes of their stored JSON, the least recently used evicted first."""


@dataclass(frozen=True)
class DispatcherSettings:
    """Topics, manifests, this process's incarnation and identity, verification polling."""

    names: TopicNames
    catalog: CapabilityCatalog
    incarnation: int
    instance: str = "dispatcher"
    verify: core.VerifyPolicy = core.VerifyPolicy()
    result_max_bytes: int = core.RESULT_MAX_BYTES  # cap of a result value on the log
    poll: core.PollPolicy = core.PollPolicy()  # how often a call running off the transaction is looked at
    sources: SourceKeys | None = field(default=None, repr=False)
    """The dispatcher's own source key (RUNFACTS_SOURCE_KEYS): its commands are signed with it."""

    @property
    def app_name(self) -> str:
        return app_name(self.names.prefix)


def app_name(prefix: str) -> str:
    """The engine application (and consumer group) name of the dispatcher."""
    return "runfacts-dispatcher" if prefix == "runfacts" else f"{prefix}-dispatcher"


class DispatcherShell:
    """The imperative shell around `dispatch_core` (see the module docstring)."""

    def __init__(self, settings: DispatcherSettings, adapters: Mapping[str, ToolAdapter],
                 args: ArgsReader, *, clock: Callable[[], float] = time.time,
                 crash: Callable[[str], None] = crash_point,
                 telemetry: telemetry_hooks.Telemetry | None = None,
                 pool: ToolPool | None = None, seal: SealPersonal | None = None,
                 pauses: PauseBoard | None = None) -> None:
        self.settings = settings
        self.telemetry = telemetry or telemetry_hooks.current()
        self.adapters = dict(adapters)
        self.args = args
        self.clock = clock
        self.crash = crash
        self.codec = Codec(CodecSettings(validate=True))
        self.actor = Actor(subjectId=settings.instance, roles=("dispatcher",), authSource="dispatcher")
        if settings.sources is not None:
            require_signing_key(settings.sources, self.actor.authSource)
        self._outcomes: OrderedDict[tuple[str, str, int, int], ToolOutcome] = OrderedDict()
        self._states: OrderedDict[bytes, tuple[bytes, RunState, dict[str, Parts]]] = OrderedDict()
        self._states_bytes = 0
        self.reruns = frozenset(cid for cid, m in settings.catalog.capabilities.items() if m.reruns_safely)
        self.pool = pool  # None: calls run inside the transaction (one at a time)
        self.seal = seal  # None: no privacy keys, the reports go out as they are
        self.pauses = pauses  # None: no capability is ever paused (no control topic read)
        self._subject = ""  # the data subject of the run at hand (its userId): what `seal` seals for
        self._salt = ""  # makes command ids of a collected try unique (its `done:` timer may repeat)
        self.limits = {cid: core.Limits(m.max_concurrency, m.rate_per_second)
                       for cid, m in settings.catalog.capabilities.items()
                       if m.max_concurrency is not None or m.rate_per_second is not None}
        self._started: dict[str, set[tuple[str, str, int, int]]] = {}  # capability -> tries on the pool
        self._last_start: dict[str, int] = {}  # capability -> when its last try started (ms)
        self._sent = 0
        self._cause: str | None = None
        self._trace: list[tuple[str, bytes]] = []

    # --- engine hooks -----------------------------------------------------------------

    def deserialize(self, data: bytes | None) -> EventBase:
        return decode_event(self.codec, data)

    def process(self, record: Record, ctx: Context) -> None:
        """Steps 2-5 of the module docstring for one event."""
        event: EventBase = record.value
        refused = misplaced_run_record(record.key, record.partition, ctx.partitions, event.runId,
                                       schema_name(event), event.schemaVersion, "event")
        if refused is not None:  # another task's run: folding it here would split it
            ctx.dead_letter(refused)
            return
        runs = ctx.store("runs")
        key = event.runId.encode()
        try:
            run = evolve(self._load(key, runs.get(key)), event)
        except CorruptLog as exc:  # a poison record: refuse it, the partition's other runs go on
            ctx.dead_letter(InvalidInput(f"cannot fold into the run's state: {exc}; the dispatcher skipped it "
                                         "(the run's state here is as before it)", schema=schema_name(event),
                                         version=event.schemaVersion, reason=UNFOLDABLE))
            return
        if run is None:
            return
        self._store(ctx, key, run)
        self._sent, self._cause, self._trace, self._salt, self._subject = 0, event.eventId, [], "", run.userId
        works = core.work_for(event, run, self.settings.incarnation, self.reruns)
        tel = self.telemetry
        if not works or not tel.enabled:
            for work in works:
                self._do(work, run, ctx, event.correlationId)
            return
        with tel.span(f"dispatcher handle {event.eventType}", parent=record.headers,
                      attributes=_span_attributes(event, works)) as span:
            self._trace = span.headers()
            for work in works:
                self._do(work, run, ctx, event.correlationId)

    def on_timer(self, timer: Timer, ctx: Context) -> None:
        """A retry, reconciliation lookup or verification poll fell due."""
        kind, _, call_id = timer.timer_id.partition(":")
        run = self._load(timer.key, ctx.store("runs").get(timer.key))
        call = run.toolCalls.get(call_id) if run is not None else None
        if run is None or call is None:
            return
        self._sent, self._cause, self._trace, self._salt, self._subject = 0, None, [], "", run.userId
        progress = self._progress(ctx, run.runId, call, run.runId)
        if kind == "retry" and self._retry_due(call, progress):
            self._retry(call, progress, run, ctx)
        elif kind == "reconcile" and call.execution == "result_unknown" and progress.phase == "reconciling":
            self._lookup(call, progress, ctx, run.runId)
        elif kind == "slot" and call.execution == "dispatching":  # waited for a free slot or the rate
            mine = core.incarnation_of(call.leaseEpoch) == self.settings.incarnation
            if mine or call.capabilityId in self.reruns:
                self._execute(call, progress, run, ctx)
            else:  # an earlier incarnation's wait: it may have started the try before it stopped
                self._collect(call, progress, run, ctx)
        elif kind == "held" and core.claimable(call, run):
            self._claim(call, progress, run, ctx)
        elif kind == "held" and call.execution == "dispatching":  # a dispatch held before its try started
            refused = core.refusal(call, run, self._now_ms())
            if refused is not None and refused.reason != "grant_expired":  # as a retry in a claim (`_retry`)
                self._refused(refused, call, run, "dispatch")
                self._apply(ctx, run.runId, call, core.Step([core.refused_draft(call, refused)], progress), "retry")
            elif core.incarnation_of(call.leaseEpoch) == self.settings.incarnation or call.capabilityId in self.reruns:
                self._dispatch(call, progress, run, ctx)
            else:  # held by an earlier incarnation, which may have started it after a resume
                why = (f"dispatch held by dispatcher incarnation {core.incarnation_of(call.leaseEpoch)}, this is "
                       f"{self.settings.incarnation}: it may have started the try before it stopped")
                self._apply(ctx, run.runId, call, core.Step([core.unknown_draft(call, why)], progress), "retry")
        elif kind == "done" and call.execution == "dispatching" and progress.phase == "executing":
            self._collect(call, progress, run, ctx)
        elif kind == "verify" and call.verification == "pending" and progress.phase == "verifying":
            outcome = self._adapter(call).lookup(call.externalRequestId or "")
            step = core.after_verify(outcome, call, progress, self.settings.verify, self._now_ms())
            self._apply(ctx, run.runId, call, step, "verify")

    # --- the runs' states ------------------------------------------------------------

    def _load(self, key: bytes, raw: bytes | None) -> RunState | None:
        """The stored state, parsed once and kept while the stored bytes stay the same (an aborted
        batch rolls the store back: other bytes, parsed again). Parsing a run's whole
        state for each of its events was a quarter of the dispatcher's CPU on a call."""
        if raw is None:
            return None
        cached = self._states.get(key)
        if cached is not None and (cached[0] is raw or cached[0] == raw):
            self._states.move_to_end(key)
            return cached[1]
        state = load_state(raw)
        self._keep(key, raw, state, {})
        return state

    def _store(self, ctx: Context, key: bytes, run: RunState) -> None:
        """Stores `run` (JSON of its unchanged calls reused from the last dump, as the decider does)."""
        cached = self._states.get(key)
        raw, parts = dump_state(run, cached[2] if cached is not None else None)
        ctx.store("runs").put(key, raw)
        self._keep(key, raw, run, parts)

    def _keep(self, key: bytes, raw: bytes, state: RunState, parts: dict[str, Parts]) -> None:
        old = self._states.pop(key, None)
        if old is not None:
            self._states_bytes -= len(old[0])
        while self._states and (len(self._states) >= STATE_CACHE_RUNS
                                or self._states_bytes + len(raw) > STATE_CACHE_BYTES):
            self._states_bytes -= len(self._states.popitem(last=False)[1][0])
        self._states[key] = (raw, state, parts)
        self._states_bytes += len(raw)

    # --- work -------------------------------------------------------------------------

    def _do(self, work: core.Work, run: RunState, ctx: Context, corr: str) -> None:
        call = work.call
        if call.capabilityId not in self.adapters and not isinstance(work, core.Forget):
            raise UnservedCapability(call.capabilityId, run.runId, call.toolCallId, sorted(self.adapters))
        progress = self._progress(ctx, run.runId, call, corr)
        match work:
            case core.Claim():
                self._claim(call, progress, run, ctx)
            case core.Execute():
                self._dispatch(call, progress, run, ctx)
            case core.ReportLost(why=why):
                self._apply(ctx, run.runId, call, core.Step([core.unknown_draft(call, why)], progress), "retry")
            case core.Reconcile(deadline_ms=deadline) if deadline and deadline <= self._now_ms():
                log.info("not reconciling %s/%s: its deadline passed (a replay, or a person has it)",
                         run.runId, call.toolCallId)
            case core.Reconcile(deadline_ms=deadline):
                self._lookup(call, core.begin_lookups(progress, "reconciling", deadline), ctx, run.runId)
            case core.Verify():
                started, wake = core.verify_wake(progress, self.settings.verify, self._now_ms())
                self._apply(ctx, run.runId, call, core.Step([], started, wake), "verify")
            case core.Cancel():
                self._cancel(call, progress, run, ctx)
            case core.Forget():
                for kind in ("retry", "reconcile", "verify", "done", "held", "slot"):
                    ctx.cancel(run.runId.encode(), f"{kind}:{call.toolCallId}")

    def _claim(self, call: ToolCallState, progress: core.Progress, run: RunState, ctx: Context) -> None:
        refused = core.refusal(call, run, self._now_ms())
        if refused is not None:
            self._refused(refused, call, run, "claim")
            return
        pause = self._paused(call)
        if pause is not None:  # no new attempt while its capability is paused: look again later
            self._apply(ctx, run.runId, call, core.held(progress, call, pause, self._now_ms()), "held")
            return
        ctx.cancel(run.runId.encode(), f"held:{call.toolCallId}")
        claim = core.claim_draft(call, self.settings.incarnation)
        if claim is None:
            log.warning("cannot claim %s/%s: incarnation %d is behind the call's epoch %d", run.runId,
                        call.toolCallId, self.settings.incarnation, call.leaseEpoch)
            return
        self._send(ctx, run.runId, progress.correlationId, [claim])

    def _dispatch(self, call: ToolCallState, progress: core.Progress, run: RunState, ctx: Context) -> None:
        """A `dispatching` of ours: execute it, unless its capability is paused and its try has not
        started here; then hold it (reported once per pause, `held:` timer) until the resume. The
        decider's authorization may carry our lease (ADR 0011): nobody read the board before it."""
        pause = self._paused(call)
        if pause is None or self._started_here(call, progress, run):
            self._execute(call, progress, run, ctx)
            return
        self._apply(ctx, run.runId, call, core.held(progress, call, pause, self._now_ms()), "held")

    def _held_dispatch(self, call: ToolCallState, progress: core.Progress, run: RunState) -> bool:
        """A dispatch held by a pause before its try started (`_dispatch`): a cancel settles it."""
        return (call.execution == "dispatching" and call.held is not None and progress.phase == "idle"
                and not self._started_here(call, progress, run))

    def _started_here(self, call: ToolCallState, progress: core.Progress, run: RunState) -> bool:
        """Whether this process started (or answered) the call's current try: a replay reuses it."""
        memo = (run.runId, call.toolCallId, call.attempts, core.start_try(progress, call, self._now_ms()).tries)
        return memo in self._outcomes or (self.pool is not None and self.pool.get(memo) is not None)

    def _execute(self, call: ToolCallState, progress: core.Progress, run: RunState, ctx: Context) -> None:
        """Call the tool once for this try (or reuse this process's earlier answer), then report.
        A capability with limits (manifest `maxConcurrency`, `ratePerSecond`) starts a new try only
        when it is admitted; otherwise the call waits, claimed, for its `slot:` timer."""
        tried = core.start_try(progress, call, self._now_ms())
        memo = (run.runId, call.toolCallId, call.attempts, tried.tries)
        if not self._admitted(call, memo):
            return self._wait_for_slot(call, run, ctx)
        progress = tried
        if self.pool is not None:
            if self._start(memo, call, progress, ctx, run.runId):
                self._collect(call, progress, run, ctx)  # done within the first look: reported now
            return
        outcome = self._outcomes.get(memo)
        if outcome is None:
            result = self._call_tool(call)
            if isinstance(result, core.Draft):
                self._apply(ctx, run.runId, call, core.Step([result], progress), "retry")
                return
            outcome = self._remember(memo, result)
            self.crash("dispatcher.after_call_before_record")
        self._report(outcome, call, progress, ctx, run.runId)

    def _start(self, memo: tuple[str, str, int, int], call: ToolCallState, progress: core.Progress,
               ctx: Context, run_id: str) -> bool:
        """Start the try on the pool (once per memo). True: it finished within the first look
        (`poll.first_ms`), so the caller reports it in this transaction, as an inline call is
        (an instant tool's report does not wait for one more commit; docs/dispatcher.md); else commit
        with the `done:` timer armed, which collects it."""
        assert self.pool is not None
        if self.pool.get(memo) is None:
            request = self._request(call)
            if isinstance(request, core.Draft):
                self._apply(ctx, run_id, call, core.Step([request], progress), "retry")
                return False
            self.pool.start(memo, self._adapter(call).execute, request)
            if call.capabilityId in self.limits:
                self._started.setdefault(call.capabilityId, set()).add(memo)
            log.info("executing %s attempt %d epoch %d off the transaction (%d calls in flight)",
                     call.toolCallId, call.attempts, call.leaseEpoch, self._in_flight())
        future = self.pool.get(memo)
        if future is not None and (future.done() or wait([future], self.settings.poll.first_ms / 1000).done):
            return True
        self._apply(ctx, run_id, call, core.executing(progress, self.settings.poll, self._now_ms()), "done")
        return False

    def _collect(self, call: ToolCallState, progress: core.Progress, run: RunState, ctx: Context) -> None:
        """The `done:` timer: report the try's outcome, look again later, or (the try ran in
        an earlier incarnation, whose answer died with it) report the outcome unknown."""
        memo = (run.runId, call.toolCallId, call.attempts, progress.tries)
        self._salt = f"-a{call.attempts}t{progress.tries}"  # a later try's timer may share due time and id
        future = self.pool.get(memo) if self.pool is not None else None
        if future is None:
            why = (f"the call was running in dispatcher incarnation {core.incarnation_of(call.leaseEpoch)}, "
                   f"this is {self.settings.incarnation}: it may have acted before it stopped")
            if call.capabilityId in self.reruns:
                self._rerun(call, progress, run, ctx, why)
                return
            self._apply(ctx, run.runId, call, core.Step([core.unknown_draft(call, why)], progress), "retry")
            return
        if not future.done():
            self._apply(ctx, run.runId, call, core.still_running(progress, self.settings.poll, self._now_ms()),
                        "done")
            return
        try:
            outcome: ToolOutcome = future.result()
        except Exception as exc:  # noqa: BLE001 - an adapter that broke its contract may have acted
            outcome = ToolUnknown(reason=f"adapter {call.capabilityId} raised {type(exc).__name__}: {exc}"[:300])
        log.info("executed %s attempt %d epoch %d: %s (%d calls in flight)", call.toolCallId,
                 call.attempts, call.leaseEpoch, outcome.kind, self._in_flight())
        self.crash("dispatcher.after_call_before_record")
        self._report(outcome, call, progress, ctx, run.runId)

    def _rerun(self, call: ToolCallState, progress: core.Progress, run: RunState, ctx: Context,
               why: str) -> None:
        """A read-only / idempotent call's try was lost with its incarnation: run it again."""
        failed = core.rerun_lost(call, progress, self.settings.catalog.get(call.capabilityId).retry, why)
        if failed is not None:
            self._apply(ctx, run.runId, call, core.Step([failed], progress), "retry")
            return
        log.info("running %s again: %s (capability %s is safe to re-run)", call.toolCallId, why, call.capabilityId)
        self._execute(call, progress, run, ctx)

    def _admitted(self, call: ToolCallState, memo: tuple[str, str, int, int]) -> bool:
        """May this try start now under its capability's limits? A try this process already
        started or answered (a replayed batch) is always admitted: it is not started twice."""
        limits = self.limits.get(call.capabilityId)
        known = memo in self._outcomes or (self.pool is not None and self.pool.get(memo) is not None)
        if limits is None or known:
            return True
        started = self._started.get(call.capabilityId, set())
        running = {m for m in started if (f := self.pool.get(m) if self.pool else None) is not None and not f.done()}
        self._started[call.capabilityId] = running
        now = self._now_ms()
        if core.admit(limits, len(running), self._last_start.get(call.capabilityId), now) is not None:
            return False
        self._last_start[call.capabilityId] = now
        return True

    def _wait_for_slot(self, call: ToolCallState, run: RunState, ctx: Context) -> None:
        limits = self.limits[call.capabilityId]
        started = self._started.get(call.capabilityId, set())
        wake = core.admit(limits, len(started), self._last_start.get(call.capabilityId), self._now_ms())
        due = wake if wake is not None else self._now_ms() + core.SLOT_POLL_MS
        log.info("%s/%s waits for %s's limits (max %s at once, %s a second)", run.runId, call.toolCallId,
                 call.capabilityId, limits.max_concurrency, limits.rate_per_second)
        ctx.schedule(run.runId.encode(), due, f"slot:{call.toolCallId}", call.toolCallId.encode())

    def _in_flight(self) -> int:
        """Calls started on the pool and not finished; also the telemetry gauge."""
        count = self.pool.in_flight if self.pool is not None else 0
        self.telemetry.gauge(telemetry_hooks.TOOL_CALLS_IN_FLIGHT, count, {"instance": self.settings.instance})
        return count

    def _report(self, outcome: ToolOutcome, call: ToolCallState, progress: core.Progress, ctx: Context,
                run_id: str) -> None:
        """Turn the try's outcome into the report (or a retry timer) in this transaction."""
        policy = self.settings.catalog.get(call.capabilityId).retry
        step = core.after_execute(outcome, call, progress, policy, self._now_ms(),
                                  result_cap=self.settings.result_max_bytes,
                                  reruns=call.capabilityId in self.reruns)
        self._apply(ctx, run_id, call, step, "retry")
        self.crash("dispatcher.after_record_before_commit")

    def _call_tool(self, call: ToolCallState) -> ToolOutcome | core.Draft:
        """The adapter's outcome, or a failure draft when the arguments are missing or altered."""
        request = self._request(call)
        if isinstance(request, core.Draft):
            return request
        outcome = self._adapter(call).execute(request)
        log.info("executed %s attempt %d epoch %d: %s", call.toolCallId, call.attempts,
                 call.leaseEpoch, outcome.kind)
        return outcome

    def _request(self, call: ToolCallState) -> ToolRequest | core.Draft:
        """The request of the call's current try, or a failure draft (arguments missing or altered)."""
        try:  # a compensating call carries its arguments in its argsRef (policy.compensation)
            inline = inline_arguments(call.argsRef, call.argsHash)
            arguments = inline if inline is not None else self.args.load_verified(call.argsRef, call.argsHash)
        except ValueError as exc:
            return core.failed_draft(call, "args_tampered", False, str(exc))
        except ArgsTampered as exc:
            return core.failed_draft(call, "args_tampered", False, str(exc))
        except ArgsMissing as exc:
            return core.failed_draft(call, "args_missing", False, str(exc))
        mismatch = core.display_mismatch(call, arguments)
        if mismatch is not None:
            return core.failed_draft(call, "args_mismatch", False, mismatch)
        return ToolRequest(tool_call_id=call.toolCallId, capability_id=call.capabilityId,
                           idempotency_key=call.idempotencyKey,
                           external_request_id=call.externalRequestId or "",
                           attempt=call.attempts, lease_epoch=call.leaseEpoch, arguments=arguments)

    def _remember(self, memo: tuple[str, str, int, int], outcome: ToolOutcome) -> ToolOutcome:
        self._outcomes[memo] = outcome
        while len(self._outcomes) > MEMO_SIZE:
            self._outcomes.popitem(last=False)
        return outcome

    def _retry_due(self, call: ToolCallState, progress: core.Progress) -> bool:
        return (call.execution == "dispatching" and progress.phase == "retry_wait"
                and progress.attempt == call.attempts)

    def _refused(self, refused: core.Refusal, call: ToolCallState, run: RunState, use: str) -> None:
        log.warning("refused %s of %s/%s attempt %d: %s (%s)", use, run.runId, call.toolCallId,
                    call.attempts + (use == "claim"), refused.reason, refused.detail)
        self.telemetry.add(telemetry_hooks.POLICY_DENIALS, 1, {"reasonCode": refused.reason,
                                                              "commandType": f"dispatcher.{use}"})

    def _retry(self, call: ToolCallState, progress: core.Progress, run: RunState, ctx: Context) -> None:
        refused = core.refusal(call, run, self._now_ms())
        if refused is not None and refused.reason != "grant_expired":  # an expiry binds claims only (§6)
            self._refused(refused, call, run, "retry")
            self._apply(ctx, run.runId, call, core.Step([core.refused_draft(call, refused)], progress), "retry")
            return
        pause = self._paused(call)
        if pause is not None:  # no new try while its capability is paused: the retry waits (same claim)
            self._apply(ctx, run.runId, call, core.held(progress, call, pause, self._now_ms()), "retry")
            return
        holder = core.incarnation_of(call.leaseEpoch)
        if holder == self.settings.incarnation or call.capabilityId in self.reruns:
            self._execute(call, progress, run, ctx)
            return
        why = (f"retry scheduled by dispatcher incarnation {holder}, this is "
               f"{self.settings.incarnation}: the earlier holder may have tried again before it stopped")
        self._apply(ctx, run.runId, call, core.Step([core.unknown_draft(call, why)], progress), "retry")

    def _lookup(self, call: ToolCallState, progress: core.Progress, ctx: Context, run_id: str) -> None:
        """One reconciliation lookup by externalRequestId."""
        outcome = self._adapter(call).lookup(call.externalRequestId or "")
        log.info("reconciled %s (%s): %s", call.toolCallId, call.externalRequestId, outcome.kind)
        policy = self.settings.catalog.get(call.capabilityId).retry
        step = core.after_lookup(outcome, call, progress, policy, self._now_ms(),
                                 result_cap=self.settings.result_max_bytes,
                                 reruns=call.capabilityId in self.reruns)
        self._apply(ctx, run_id, call, step, "reconcile")

    def _cancel(self, call: ToolCallState, progress: core.Progress, run: RunState, ctx: Context) -> None:
        """Cancel at the provider where it can; report what is then true, or keep reconciling.

        Only calls this dispatcher is still working on (waiting to retry, or reconciling) are
        cancelled: a replayed `run.cancel_requested` for a call settled later does nothing."""
        adapter, request_id = self._adapter(call), call.externalRequestId or ""
        if call.execution == "result_unknown" and progress.phase == "reconciling":
            adapter.cancel(request_id)
            self._lookup(call, progress.model_copy(update={"phase": "reconciling"}), ctx, run.runId)
        elif self._retry_due(call, progress) or self._held_dispatch(call, progress, run):
            cancelled = adapter.cancel(request_id)
            found = None if cancelled else adapter.lookup(request_id)
            self._apply(ctx, run.runId, call, core.after_cancel(cancelled, found, call, progress,
                                                                    result_cap=self.settings.result_max_bytes), "retry")

    # --- plumbing ---------------------------------------------------------------------

    def _paused(self, call: ToolCallState) -> Pause | None:
        """The pause that holds `call`'s capability now, or None."""
        return None if self.pauses is None else self.pauses.paused(call.capabilityId)

    def _adapter(self, call: ToolCallState) -> ToolAdapter:
        return self.adapters[call.capabilityId]

    def _now_ms(self) -> int:
        return int(self.clock() * 1000)

    @staticmethod
    def _progress_key(run_id: str, call_id: str) -> bytes:
        return f"{run_id}\x00{call_id}".encode()

    def _progress(self, ctx: Context, run_id: str, call: ToolCallState, corr: str) -> core.Progress:
        raw = ctx.store("progress").get(self._progress_key(run_id, call.toolCallId))
        if raw is None:
            return core.Progress(toolCallId=call.toolCallId, correlationId=corr)
        return core.load_progress(raw)

    def _apply(self, ctx: Context, run_id: str, call: ToolCallState, step: core.Step, timer: str) -> None:
        """Send the step's commands, keep the call's progress, (re)arm or clear its timer."""
        self._send(ctx, run_id, step.progress.correlationId, step.drafts)
        ctx.store("progress").put(self._progress_key(run_id, call.toolCallId),
                                  step.progress.model_dump_json().encode())
        key, timer_id = run_id.encode(), f"{timer}:{call.toolCallId}"
        if step.wake_at_ms is None:
            ctx.cancel(key, timer_id)
        else:
            ctx.schedule(key, step.wake_at_ms, timer_id, call.toolCallId.encode())

    def _send(self, ctx: Context, run_id: str, corr: str, drafts: list[core.Draft]) -> None:
        issued = datetime.fromtimestamp(self.clock(), tz=UTC)
        for d in drafts:
            command_id = f"dsp-{ctx.derive_id(self._sent)}{self._salt}"
            command = new_command(d.command, commandId=command_id, runId=run_id,
                                  actor=self.actor, issuedAt=issued, correlationId=corr,
                                  causationId=self._cause, payload=d.payload)
            self._sent += 1
            if self.seal is not None:  # the tool's result, error texts: sealed for the run's user
                command = self.seal(command, self._subject)
            value, sources = self.codec.encode(command), self.settings.sources
            signed = sign(sources, self.actor.authSource, value) if sources is not None else []
            ctx.emit(self.settings.names.commands, run_id.encode(), value,
                     self.codec.headers(command) + signed + self._trace)
            log.info("sent %s for %s/%s", command.commandType, run_id,
                     getattr(d.payload, "toolCallId", "?"))

    def application(self) -> Application:
        """The engine application for this shell."""
        names = self.settings.names
        return Application(
            name=self.settings.app_name,
            sources=(Source(names.events, value_deserializer=self.deserialize),),
            process=self.process, on_timer=self.on_timer, stores=("runs", "progress"),
            dead_letter_topic=names.dlq, metrics_topic=names.metrics,
        )


def _span_attributes(event: EventBase, works: list[core.Work]) -> dict[str, str]:
    return {"runfacts.run_id": event.runId, "runfacts.event_id": event.eventId,
            "runfacts.event_type": event.eventType, "runfacts.correlation_id": event.correlationId,
            "runfacts.causation_id": event.causationId or "",
            "runfacts.work": ",".join(type(w).__name__ for w in works),
            "runfacts.tool_call_ids": ",".join(sorted({w.call.toolCallId for w in works}))}


def result_cap(environ: Mapping[str, str] | None = None) -> int:
    """RUNFACTS_TOOL_RESULT_MAX_BYTES: the cap of a result value on the log (bytes, >= 0)."""
    from runfacts.schemas.errors import ConfigError

    raw = (os.environ if environ is None else environ).get("RUNFACTS_TOOL_RESULT_MAX_BYTES", "")
    if not raw:
        return core.RESULT_MAX_BYTES
    if not raw.isdigit():
        raise ConfigError("RUNFACTS_TOOL_RESULT_MAX_BYTES", raw, "expected a number of bytes, e.g. 16384")
    return int(raw)
