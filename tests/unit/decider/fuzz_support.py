"""Bad input for the run decider's shell on the broker-free test driver, and its accounting.

A `Probe` is a fresh decider shell (the worker's own policy and capabilities) on a
`TestDriver`. `feed` pipes ONE record and classifies what came out of it:
processed (events), rejected (exactly one `command.rejected`), dead-lettered (exactly one
dead letter with readable reason headers) or deduplicated (nothing, and the same commandId
was already decided on that run). Anything else — an exception out of the shell, outputs
of two kinds, nothing for a command never seen — fails the test: nothing is silently dropped.
"""

from __future__ import annotations

import atexit
import json
import logging
import os
import typing
from collections import Counter
from datetime import UTC, datetime, timedelta
from typing import Any, NamedTuple

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

from runfacts.dev.crash.workload import Commands, Input, ticking, valid
from runfacts.processors.decider.app import DeciderShell
from runfacts.processors.engine.testdriver import TestDriver
from runfacts.schemas import codec
from runfacts.schemas.common import CommandBase
from runfacts.schemas.errors import InvalidInput
from runfacts.topics import TopicNames
from runfacts.workers import decide_context

NAMES = TopicNames("fz")
T0 = datetime(2026, 7, 27, 8, 40, tzinfo=UTC)
T0_MS = int(T0.timestamp() * 1000)
SHELL = DeciderShell(NAMES, decide_context())
APP = SHELL.application()
logging.getLogger("runfacts.engine").setLevel(logging.ERROR)  # a warning per dead letter would dominate
SCALE = int(os.environ.get("RUNFACTS_FUZZ_SCALE", "1"))
DLQ_HEADERS = ("dlq.topic", "dlq.partition", "dlq.offset", "dlq.schema", "dlq.schemaVersion", "dlq.error",
               "dlq.app")
TALLY: Counter[str] = Counter()  # outcome kinds over the session: RUNFACTS_FUZZ_TALLY=<file> writes them


def _write_tally() -> None:
    target = os.environ.get("RUNFACTS_FUZZ_TALLY")
    if target and TALLY:
        with open(target, "w", encoding="utf-8") as fh:
            json.dump(dict(TALLY), fh)


atexit.register(_write_tally)


def fuzz_settings(examples: int) -> settings:
    """`examples` x RUNFACTS_FUZZ_SCALE cases (CI: scale 1; `make fuzz`: 10)."""
    return settings(max_examples=examples * SCALE, deadline=None, database=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


class Outcome(NamedTuple):
    kind: str  # processed | rejected | dead_lettered | deduplicated
    reason: str
    event_types: tuple[str, ...]


class Probe:
    """A fresh decider shell; `feed` pipes one record and says what became of it."""

    def __init__(self) -> None:
        self.driver = TestDriver(APP, start_ms=T0_MS)
        self.commands = Commands("fz", ticking(T0, timedelta(seconds=1)))
        self.decided: set[tuple[str, str]] = set()
        self._events = 0
        self._dead = 0
        self.fed = 0
        self.kinds: Counter[str] = Counter()
        TALLY["cases"] += 1  # one probe per hypothesis example

    def feed(self, item: Input | CommandBase) -> Outcome:
        record = valid(item) if isinstance(item, CommandBase) else item
        offset = self.fed
        self.driver.pipe(NAMES.commands, record.value, record.key, headers=list(record.headers) or None)
        self.fed += 1
        events = [codec.decode(r.value) for r in self.driver.outputs(NAMES.events)[self._events:]]
        dead = self.driver.outputs(NAMES.dlq)[self._dead:]
        self._events += len(events)
        self._dead += len(dead)
        outcome = self._classify(record, offset, events, dead)
        self.kinds[outcome.kind] += 1
        TALLY[outcome.kind] += 1
        return outcome

    def send(self, *items: Input | CommandBase) -> list[Outcome]:
        return [self.feed(i) for i in items]

    def given(self, *commands: CommandBase) -> Probe:
        """Set-up commands that must be processed (not rejected)."""
        for c in commands:
            outcome = self.feed(c)
            assert outcome.kind == "processed", (c.commandType, outcome)
        return self

    def _classify(self, record: Input, offset: int, events: list[Any], dead: list[Any]) -> Outcome:
        assert not (events and dead), f"both events and a dead letter for offset {offset}"
        if dead:
            assert len(dead) == 1, dead
            return Outcome("dead_lettered", readable_reason(dead[0].headers, offset), ())
        command = decoded(record)
        assert command is not None, f"offset {offset}: undecodable record produced {len(events)} events"
        key = (command.runId, command.commandId)
        if not events:
            assert key in self.decided, f"offset {offset}: {command.commandType} {key} silently dropped"
            return Outcome("deduplicated", "", ())
        assert {e.causationId for e in events} == {command.commandId}, events
        self.decided.add(key)
        types = tuple(e.eventType for e in events)
        if "command.rejected" in types:
            assert types == ("command.rejected",), types
            return Outcome("rejected", events[0].payload.reasonCode, types)
        return Outcome("processed", "", types)

    def still_running(self) -> None:
        """A fresh run is still created after whatever came before (the shell keeps going)."""
        n = self.fed
        outcome = self.feed(self.commands.create(f"canary-{n}"))
        assert outcome == Outcome("processed", "", ("run.created", "run.started")), outcome

    def balanced(self) -> None:
        """Records in = processed + rejected + dead-lettered + deduplicated, checked against the outputs."""
        events = [codec.decode(r.value) for r in self.driver.outputs(NAMES.events)]
        k = self.kinds
        assert k["processed"] + k["rejected"] == len({(e.runId, e.causationId) for e in events})
        assert k["rejected"] == sum(e.eventType == "command.rejected" for e in events)
        assert k["dead_lettered"] == len(self.driver.outputs(NAMES.dlq))
        assert sum(k.values()) == self.fed


def decoded(record: Input) -> CommandBase | None:
    """The command as the shell reads it (None: the shell could not)."""
    try:
        return SHELL.deserialize(record.value, list(record.headers))
    except InvalidInput:
        return None


def readable_reason(headers: Any, offset: int) -> str:
    """The dead letter's reason headers: all present, UTF-8, naming this record's position."""
    found = {k: v.decode("utf-8") for k, v in headers or [] if k.startswith("dlq.")}
    missing = [h for h in DLQ_HEADERS if h not in found]
    assert not missing, f"dead letter lacks {missing}: {found}"
    assert found["dlq.error"].strip(), found
    assert (found["dlq.topic"], found["dlq.offset"], found["dlq.app"]) == (NAMES.commands, str(offset), APP.name)
    return found["dlq.error"]


# --- strategies -------------------------------------------------------------------------

def text(max_size: int = 40, min_size: int = 0) -> st.SearchStrategy[str]:
    return st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), min_size=min_size, max_size=max_size)


def _field_value(annotation: Any) -> st.SearchStrategy[Any] | None:
    """Random values of a payload field's type (None: a type this fuzzer leaves alone)."""
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if annotation is str:
        return text()
    if annotation is bool:
        return st.booleans()
    if annotation is int:
        return st.integers(-3, 2**31)
    if origin is typing.Literal:
        return st.sampled_from(args)
    if origin is tuple and args[:1] == (str,):
        return st.lists(text(20), max_size=4).map(tuple)
    if type(None) in args:
        inner = next(a for a in args if a is not type(None))
        base = _field_value(inner)
        return None if base is None else st.none() | base
    return None


@st.composite
def mutated_command(draw: st.DrawFn, command: CommandBase) -> CommandBase:
    """`command` with one payload field or the expected version replaced by a random value."""
    fields = type(command.payload).model_fields
    choices = [name for name, f in fields.items() if _field_value(f.annotation) is not None]
    name = draw(st.sampled_from([*choices, "<expectedVersion>"]))
    if name == "<expectedVersion>":
        return command.model_copy(update={"expectedVersion": draw(st.none() | st.integers(-1, 30))})
    value = draw(_field_value(fields[name].annotation))  # type: ignore[arg-type]
    return command.model_copy(update={"payload": command.payload.model_copy(update={name: value})})
