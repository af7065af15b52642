"""The crash matrix's oracle: what the committed commands log must have produced, and a verdict.

`expect` folds the complete committed input log (each partition in offset order) through the
pure decider with the worker's own `DecideContext` and input rules, exactly as the shell
sees it: undecodable, oversized or misrouted records are dead letters, a command is judged
at its broker time when that is later than `issuedAt`, orphans and repeated commandIds
decide nothing, and a partition's drains (`version.drained`) refuse its later `run.create`s on
the drained versions (as the shell's store does). `verdict` compares that with what the topics hold:
- the events topic has exactly the expected events per run, in order, with the same
  eventIds and contents — no duplicate, no gap. At-least-once may repeat an event
  (byte-identical, same eventId); it is counted, and the first copies must equal the oracle;
- the last run.state record of every run equals the oracle state, and its last user view
  equals the view of that state (when the worker publishes views);
- one dead letter per expected one (at-least-once: per distinct input position);
- counts balance: records in = processed + rejected + dead-lettered + deduplicated, where
  processed and rejected are counted from the events topic.
`ledger_problems` checks the provider's ground truth: one refund per authorized call.

Timers: a due timer is decided as a `timer.fire` command that never reaches the commands
topic. Given the events log, `expect` folds a fire where the log shows one (an event caused by
`timer:<id>:<due ms>` is next for that run), rebuilt from what the oracle's own state wants
(`wanted_timers`): a fire the state did not want, or one repeated, is a problem; a fire that
never came shows as a missing event or state.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from typing import Any

from runfacts.logread import LogRecord
from runfacts.processors.decider.app import DeciderShell, claimant, effective_command, timer_command
from runfacts.processors.decider.core import decide_evolve
from runfacts.processors.decider.state import RunState
from runfacts.processors.decider.timers import wanted_timers
from runfacts.schemas import codec
from runfacts.schemas import commands as cmd
from runfacts.schemas import events as ev
from runfacts.schemas.common import EventBase
from runfacts.schemas.errors import InvalidInput
from runfacts.schemas.models import decode_event

Publish = Callable[[RunState], Iterable[tuple[str, bytes, bytes | None]]]


@dataclass
class Expected:
    """The oracle: events and final state per run, and what became of each input record."""

    events: dict[str, list[EventBase]] = field(default_factory=dict)
    states: dict[str, RunState] = field(default_factory=dict)
    counts: Counter[str] = field(default_factory=Counter)
    fired: int = 0  # timer fires folded (not input records)
    problems: list[str] = field(default_factory=list)

    @property
    def records_in(self) -> int:
        return sum(self.counts.values())


def expect(commands: Iterable[LogRecord], shell: DeciderShell,
           events: Iterable[LogRecord] | None = None) -> Expected:
    """Fold the committed commands log through the pure decider (see the module docstring);
    with `events`, the timer fires they show too."""
    out = Expected()
    orphans: set[tuple[str, str]] = set()
    dispatchers: dict[int, int] = {}  # per partition, the last claimant (the shell's `DISPATCHER_KEY`)
    drained: dict[int, set[tuple[str, str]]] = {}  # per partition, its drained versions (`DRAINED_KEY`)
    causes = None if events is None else _causes(events)
    for record in commands:
        if causes is not None and record.key is not None:
            _fire_timers(record.key.decode(errors="replace"), causes, shell, out)
        out.counts[_fold_one(record, shell, out, orphans, dispatchers, drained)] += 1
    for run in list(causes or {}):
        _fire_timers(run, causes or {}, shell, out)
    return out


def _causes(events: Iterable[LogRecord]) -> dict[str, list[str]]:
    """Per run, the causationId of each first-copy event, in log order."""
    seen: set[str] = set()
    out: dict[str, list[str]] = {}
    for record in events:
        event = decode_event(codec.default_codec(), record.value)
        if event.eventId not in seen:
            seen.add(event.eventId)
            out.setdefault(event.runId, []).append(event.causationId or "")
    return out


def _fire_timers(run: str, causes: dict[str, list[str]], shell: DeciderShell, out: Expected) -> None:
    """Fold the timer fires the log shows next for `run` (see the module docstring)."""
    actual = causes.get(run, [])
    while len(out.events.get(run, [])) < len(actual) and actual[len(out.events.get(run, []))].startswith("timer:"):
        cause = actual[len(out.events.get(run, []))]
        timer_id, _, due = cause.removeprefix("timer:").rpartition(":")
        state = out.states.get(run)
        spec = wanted_timers(state, shell.ctx.capabilities).get(timer_id)
        if spec is None or int(spec.due.timestamp() * 1000) != int(due):
            out.problems.append(f"{run}: timer {cause} fired, but the state wants {spec}")
            return
        events, new = decide_evolve(timer_command(run, timer_id, int(due), spec.kind, spec.target_id),
                                    state, shell.ctx)
        if not events or new is None:
            out.problems.append(f"{run}: timer {cause} decides nothing (a repeated fire?)")
            return
        out.events.setdefault(run, []).extend(events)
        out.states[run] = new
        out.fired += 1


def _fold_one(record: LogRecord, shell: DeciderShell, out: Expected, orphans: set[tuple[str, str]],
              dispatchers: dict[int, int], drained: dict[int, set[tuple[str, str]]]) -> str:
    try:
        command = shell.deserialize(record.value, list(record.headers))
    except InvalidInput:
        return "dead_lettered"
    if record.key != command.runId.encode():
        return "dead_lettered"
    command = effective_command(command, record.timestamp_ms, shell.max_backdate_ms)
    state = out.states.get(command.runId)
    orphan = (command.runId, command.commandId)
    if state is None and orphan in orphans:
        return "deduplicated"
    ctx = shell.context_for(dispatchers.get(record.partition))
    if isinstance(command, cmd.CreateRun) and drained.get(record.partition):  # as the shell's `_context_for`
        ctx = replace(ctx, drained=frozenset(drained[record.partition]))
    events, new = decide_evolve(command, state, ctx)
    for e in events:  # as the shell's `_note_drain`: the partition refuses new runs on a drained version
        if isinstance(e, ev.VersionDrained):
            pair = (e.payload.dimension, e.payload.version)
            (drained.setdefault(record.partition, set()).discard if e.payload.undo
             else drained.setdefault(record.partition, set()).add)(pair)
    learned = claimant(command, events)
    if learned is not None:
        dispatchers[record.partition] = learned
    if new is None:
        orphans.add(orphan)
    else:
        out.states[command.runId] = new
    if not events:
        return "deduplicated"
    out.events.setdefault(command.runId, []).extend(events)
    return "rejected" if events[0].eventType == "command.rejected" else "processed"


@dataclass
class Verdict:
    """The oracle's judgement of one run of a scenario."""

    problems: list[str]
    numbers: dict[str, int]

    @property
    def ok(self) -> bool:
        return not self.problems

    def summary(self) -> str:
        n = self.numbers
        text = (f"in {n.get('in', 0)} = {n.get('processed', 0)} processed + {n.get('rejected', 0)} rejected + "
                f"{n.get('dead_lettered', 0)} dead + {n.get('deduplicated', 0)} dedup; {n.get('events', 0)} events")
        if n.get("duplicate_dead_letters"):
            text += f", {n['duplicate_dead_letters']} dead letters repeated"
        return text


def verdict(expected: Expected, events: list[LogRecord], states: list[LogRecord], dead: list[LogRecord],
            commands_topic: str, *, allow_duplicates: bool = False, views: list[LogRecord] | None = None,
            publish: Publish | None = None) -> Verdict:
    """Compare the topics' contents with the oracle (see the module docstring)."""
    problems: list[str] = list(expected.problems)
    firsts, duplicates = _first_copies(events, problems)
    if duplicates and not allow_duplicates:
        problems.append(f"{duplicates} duplicate event(s) under exactly-once")
    problems += _event_problems(expected, firsts)
    problems += _state_problems(expected, states)
    if views is not None and publish is not None:
        problems += view_problems(expected, views, publish)
    letters = {(_header(r, "dlq.partition"), _header(r, "dlq.offset")): r for r in dead
               if _header(r, "dlq.topic") == commands_topic}
    if len(letters) != expected.counts["dead_lettered"] or (len(dead) != len(letters) and not allow_duplicates):
        problems.append(f"{len(dead)} dead letters ({len(letters)} distinct), "
                        f"oracle {expected.counts['dead_lettered']}")
    seen = Counter("rejected" if e.eventType == "command.rejected" else "processed"
                   for e in {(e.runId, e.causationId): e for evs in firsts.values() for e in evs}.values()
                   if not (e.causationId or "").startswith("timer:"))
    balance = seen["processed"] + seen["rejected"] + len(letters) + expected.counts["deduplicated"]
    if balance != expected.records_in or seen["rejected"] != expected.counts["rejected"]:
        problems.append(f"counts do not balance: in {expected.records_in}, seen {dict(seen)} + "
                        f"{len(letters)} dead + {expected.counts['deduplicated']} dedup")
    kinds = {k: expected.counts[k] for k in ("processed", "rejected", "dead_lettered", "deduplicated")}
    numbers = {"in": expected.records_in, **kinds, "events": sum(len(v) for v in firsts.values()),
               "duplicate_events": duplicates, "duplicate_dead_letters": len(dead) - len(letters),
               "timers_fired": expected.fired}
    return Verdict(problems, numbers)


def _first_copies(events: list[LogRecord], problems: list[str]) -> tuple[dict[str, list[EventBase]], int]:
    """Events per run in log order, first copy of each eventId; repeats must be byte-identical."""
    first: dict[str, bytes] = {}
    runs: dict[str, list[EventBase]] = {}
    duplicates = 0
    for record in events:
        event = decode_event(codec.default_codec(), record.value)
        if event.eventId in first:
            duplicates += 1
            if first[event.eventId] != record.value:
                problems.append(f"eventId {event.eventId} repeated with different bytes")
            continue
        first[event.eventId] = record.value or b""
        runs.setdefault(event.runId, []).append(event)
    return runs, duplicates


def _event_problems(expected: Expected, actual: dict[str, list[EventBase]]) -> list[str]:
    problems = []
    for run in sorted(set(expected.events) | set(actual)):
        want, got = expected.events.get(run, []), actual.get(run, [])
        if [e.eventId for e in want] != [e.eventId for e in got]:
            problems.append(f"{run}: {len(got)} events, oracle {len(want)}; first difference at "
                            f"{_first_difference([e.eventId for e in want], [e.eventId for e in got])}")
        elif want != got:
            problems.append(f"{run}: same eventIds, different contents")
    return problems


def _state_problems(expected: Expected, states: list[LogRecord]) -> list[str]:
    last: dict[str, Any] = {}
    for record in states:
        if record.key is not None and record.value is not None:
            last[record.key.decode()] = json.loads(record.value)
    problems = []
    for run in sorted(set(expected.states) | set(last)):
        want = expected.states.get(run)
        if want is None or json.loads(want.model_dump_json()) != last.get(run):
            got = last.get(run, {}).get("version")
            problems.append(f"{run}: last run.state (version {got}) differs from the oracle "
                            f"(version {None if want is None else want.version})")
    return problems


def view_problems(expected: Expected, views: list[LogRecord], publish: Publish) -> list[str]:
    """The last view record of every run is the view of the oracle state, byte for byte."""
    last = {r.key: r.value for r in views}
    problems = []
    for run, state in sorted(expected.states.items()):
        want = {key: value for _, key, value in publish(state)}
        for key, value in want.items():
            if last.get(key, b"<missing>") != value:
                problems.append(f"{run}: last user view differs from the view of the oracle state")
    strays = set(last) - {k for s in expected.states.values() for _, k, _ in publish(s)}
    if strays:
        problems.append(f"user views for runs the oracle does not know: {sorted(map(str, strays))[:3]}")
    return problems


def _first_difference(want: list[str], got: list[str]) -> int:
    for i, (a, b) in enumerate(zip(want, got, strict=False)):
        if a != b:
            return i
    return min(len(want), len(got))


def _header(record: LogRecord, name: str) -> str:
    for key, value in record.headers:
        if key == name:
            return value.decode(errors="replace")
    return ""


def ledger_problems(expected: Expected, refunds: list[Any]) -> list[str]:
    """Exactly one executed refund per authorized call, carrying that call's idempotency key."""
    keys = Counter(r.idempotency_key for r in refunds)
    problems = []
    authorized = [(run, call) for run, state in expected.states.items() for call in state.toolCalls.values()
                  if call.execution not in ("proposed",) and call.capabilityId == "payments.refund"
                  and any(isinstance(e, ev.ToolCallAuthorized) and e.payload.toolCallId == call.toolCallId
                          for e in expected.events.get(run, []))]
    for run, call in authorized:
        if keys.get(call.idempotencyKey, 0) != 1:
            problems.append(f"{run}/{call.toolCallId}: {keys.get(call.idempotencyKey, 0)} refunds in the ledger")
    wanted = {call.idempotencyKey for _, call in authorized}
    strays = [k for k in keys if k not in wanted]
    if strays:
        problems.append(f"refunds without an authorized call: {strays}")
    return problems
