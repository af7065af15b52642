"""Every event list in the docs is a tested fact (issue 15 item 11).

docs/decider.md said a rejected approval emits `tool.call.failed(approval_rejected)`; the
decider emits `approval.rejected` and closes the call. Now the docs list command -> events in
tables headed `story | command | events, in order`; this test finds every such table in
docs/*.md and the README, replays each story's commands in order through the decider shell on
the broker-free test driver (processors/engine/testdriver.py) and compares, row by row, the event
types (and a `(x)` reason, outcome, status or reason code) with what the decider emitted.
A story or a command the test cannot play fails it too, so a new row must come with its
command here. A second test refuses event lists left in prose (`→ `a.b`, `c.d``), which
nothing would check.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

from runfacts.dev.crash.workload import DISPATCHER, Commands, ticking
from runfacts.processors.engine.testdriver import TestDriver
from runfacts.schemas import codec
from runfacts.schemas import commands as cmd
from runfacts.schemas.catalog import default_catalog
from runfacts.schemas.common import CommandBase, EventBase

from ..decider.fuzz_support import APP, NAMES, T0, T0_MS

ROOT = Path(__file__).resolve().parents[3]
DOCS = [*sorted((ROOT / "docs").glob("*.md")), ROOT / "README.md"]
HEADER = ("story", "command", "events, in order")
TICK = re.compile(r"`([^`]+)`")
EXPIRY_MS = 16 * 60 * 1000  # past the packaged refund approval TTL (15 min)
EVENT_TYPES = {e.type_name for e in default_catalog().current.values() if e.kind == "event"}
EVENT_CLASSES = {e.name for e in default_catalog().current.values() if e.kind == "event"}


@dataclass(frozen=True)
class Row:
    where: str
    story: str
    command: str
    events: tuple[str, ...]


def rows() -> list[Row]:
    """Every row of every `story | command | events, in order` table in the docs."""
    found: list[Row] = []
    for doc in DOCS:
        lines = doc.read_text(encoding="utf-8").splitlines()
        in_table = False
        for number, line in enumerate(lines, 1):
            cells = tuple(c.strip() for c in line.strip().strip("|").split("|"))
            if cells == HEADER:
                in_table = True
            elif in_table and not line.startswith("|"):
                in_table = False
            elif in_table and not set(line) <= set("|- "):
                story, command, events = cells
                found.append(Row(f"{doc.name}:{number}", story, command, tuple(TICK.findall(events))))
    return found


# --- what each documented command means ---------------------------------------------------------

RUN, CALL, CALL2 = "doc-run", "call-doc-run", "call-doc-run-2"
Step = Callable[[Commands], CommandBase | None]  # None: let the approval's TTL pass


def _commands() -> dict[str, Step]:
    """The command column's text -> the command it names (one run, one refund call)."""
    return {
        "`run.create`": lambda c: c.create(RUN),
        "`reasoning.record`": lambda c: c.reasoning(RUN),
        "`tool.call.propose` (a high-risk refund)": lambda c: c.propose(RUN, CALL),
        "`tool.call.propose` (a refund of -5, displayed)": lambda c: _displayed(c.propose(RUN, CALL), -5),
        "`run.resume` approve": lambda c: c.resume(RUN, CALL),
        "`run.resume` reject": lambda c: c.resume(RUN, CALL, "reject"),
        "`tool.call.propose` (a second high-risk refund)": lambda c: c.propose(RUN, CALL2, order="order-002"),
        "`run.resume` approve (the second)": lambda c: c.resume(RUN, CALL2, order="order-002"),
        "`tool.call.claim`": lambda c: c.claim(RUN, CALL),
        "`tool.call.report_result_unknown`": lambda c: c.unknown(RUN, CALL),
        "`tool.call.report_reconciled` found_completed": lambda c: c.reconciled(RUN, CALL),
        "`tool.call.report_verification` confirmed_success": lambda c: c.verified(RUN, CALL),
        "`tool.call.report_completed`": lambda c: _completed(c),
        "`tool.call.report_completed` (`verification` confirmed_success: the tool answered the dispatcher)":
            lambda c: _completed(c, verification="confirmed_success"),
        "`run.complete`": lambda c: c.complete(RUN),
        "`run.cancel`": lambda c: c.cancel(RUN),
        "(the approval's TTL passes: its timer fires)": lambda c: None,
    }


def _completed(c: Commands, **extra: Any) -> Any:
    """The dispatcher's report that the refund call completed (v3: with `extra`'s verification)."""
    return c.make(cmd.ReportToolCompleted, RUN, DISPATCHER, toolCallId=CALL, attempt=1,
                  externalRequestId=f"{CALL}-a1", resultRef=f"refund/{CALL}", resultHash="h1", **extra)


def _displayed(proposal: Any, amount: int) -> Any:
    """The proposal with the argument display a client renders for a refund of `amount`."""
    from runfacts.processors.policy.capabilities import load_capabilities
    from runfacts.processors.policy.display import render

    schema = load_capabilities().get(proposal.payload.capabilityId).schema_or_none()
    display = render({"orderId": "order-001", "amountMinor": amount, "currency": "EUR"}, schema)
    return proposal.model_copy(update={"payload": proposal.payload.model_copy(update={"display": display})})


def _detail(event: EventBase) -> str | None:
    payload: Any = event.payload
    for name in ("reason", "reasonCode", "outcome", "status"):
        value = getattr(payload, name, None)
        if isinstance(value, str):
            return value
    return None


def _as_documented(emitted: list[EventBase], documented: tuple[str, ...]) -> tuple[str, ...]:
    """The emitted events, written as the doc wrote each (with `(x)` where the doc has one)."""
    out = []
    for i, event in enumerate(emitted):
        with_detail = i < len(documented) and documented[i].startswith(event.eventType + "(")
        out.append(f"{event.eventType}({_detail(event)})" if with_detail else event.eventType)
    return tuple(out)


def _play(story: list[Row]) -> list[tuple[str, tuple[str, ...], tuple[str, ...]]]:
    """Each row's (where, documented, emitted as documented)."""
    commands, steps = Commands("doc", ticking(T0, timedelta(seconds=1))), _commands()
    driver = TestDriver(APP, start_ms=T0_MS)
    seen, out = 0, []
    for row in story:
        assert row.command in steps, f"{row.where}: the test cannot play {row.command!r}; add it to _commands()"
        command = steps[row.command](commands)
        if command is None:
            driver.advance(EXPIRY_MS)
        else:
            driver.pipe(NAMES.commands, codec.encode(command), command.runId.encode(),
                        headers=list(codec.headers(command)))
        emitted = [codec.decode(r.value) for r in driver.outputs(NAMES.events)[seen:]]
        seen += len(emitted)
        out.append((row.where, row.events, _as_documented(emitted, row.events)))
    return out


def test_the_docs_have_event_tables_covering_approve_reject_expire_and_cancel() -> None:
    stories = {r.story for r in rows()}
    assert {"approve", "reject", "expire", "cancel"} <= stories, stories
    assert all(r.events for r in rows()), [r.where for r in rows() if not r.events]


def test_every_documented_event_list_is_what_the_decider_emits() -> None:
    by_story: dict[str, list[Row]] = {}
    for row in rows():
        by_story.setdefault(row.story, []).append(row)
    wrong = [f"{where}: docs say {', '.join(doc)}; the decider emits {', '.join(emitted) or 'nothing'}"
             for story in by_story.values() for where, doc, emitted in _play(story) if doc != emitted]
    assert wrong == [], "\n".join(wrong)


def test_a_rejected_approval_closes_the_call_without_a_failed_event() -> None:
    """The defect the docs had, pinned on the code side as well."""
    reject = [r for r in rows() if r.story == "reject"]
    emitted = [e for _, _, e in _play(reject)]
    assert ("approval.rejected", "run.resumed") in emitted
    assert not any(t.startswith("tool.call.failed") for e in emitted for t in e)


ARROW_LIST = re.compile(r"(→|->)\s*`([^`]+)`\s*,\s*`([^`]+)`")


def test_no_event_list_is_left_in_prose_where_no_test_reads_it() -> None:
    loose = []
    for doc in DOCS:
        for number, line in enumerate(doc.read_text(encoding="utf-8").splitlines(), 1):
            for match in ARROW_LIST.finditer(line):
                names = {n.split("(")[0] for n in match.groups()[1:]}
                if names & (EVENT_TYPES | EVENT_CLASSES):
                    loose.append(f"{doc.name}:{number}: {line.strip()}")
    assert loose == [], "event lists belong in a `story | command | events, in order` table:\n" + "\n".join(loose)
