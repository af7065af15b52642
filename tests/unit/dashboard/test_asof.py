"""The run as of any fact (issue 39), pure: the decider's fold over the first N facts gives the
state, view and pending calls then, and what fact N changed; trimmed by role."""

from __future__ import annotations

from datetime import UTC, datetime

from console_support import refund_story
from decider_support import Scenario

from runfacts.client.outcomes import Entry
from runfacts.dashboard.console import as_of_section
from runfacts.dashboard.retell.asof import AsOf, snapshot
from runfacts.dashboard.retell.asof import as_of as _as_of
from runfacts.dashboard.runpage import timeline
from runfacts.ops.views import Viewer
from runfacts.processors.decider.evolve import fold

T0 = datetime(2026, 12, 6, 10, 40, tzinfo=UTC)
OLGA, AUDREY = Viewer("olga", ("operator",)), Viewer("audrey", ("auditor",))
RUN = "run-asof-1"


def _refund() -> tuple[Scenario, list[Entry]]:
    s = Scenario().given(*refund_story(RUN, T0))
    return s, [Entry(100 + i, e) for i, e in enumerate(s.log)]


def as_of(run: str, entries: list[Entry], n: int, viewer: Viewer) -> AsOf:
    """As the app asks: with fact n in the timeline's words."""
    fact = next((f for turn in timeline(entries, viewer, n - 1, n) for f in turn.facts), None)
    return _as_of(run, entries, n, viewer, fact=fact)


def _number(entries: list[Entry], event_type: str) -> int:
    return next(i + 1 for i, e in enumerate(entries) if e.event_type == event_type)


def test_the_approval_fact_changes_the_approval_and_the_status_and_is_marked_as_of_n_of_m() -> None:
    s, entries = _refund()
    n = _number(entries, "approval.granted")
    a = as_of(RUN, entries, n, OLGA)
    assert (a.number, a.total) == (n, len(entries)) and a.fact is not None
    assert a.fact.event_type == "approval.granted"
    changed = {c.key: (c.before, c.after) for c in a.changes}
    assert changed["approval approval-tool-call-031"] == ("open (role support agent)",
                                                          "granted by [redacted] (role support agent)")
    assert a.pending == ("tool-call-031: refund on order-001, proposed",)
    html = as_of_section(a)
    assert f"as of fact {n} of {len(entries)}" in html and 'id="as-of-diff"' in html


def test_auditor_reads_who_decided_and_the_state_matches_the_fold_of_the_first_n_facts() -> None:
    s, entries = _refund()
    for n in (1, 4, len(entries)):
        a = as_of(RUN, entries, n, AUDREY)
        assert dict(a.lines) == snapshot(fold(None, [e.event for e in entries[:n]]), AUDREY)
    a = as_of(RUN, entries, _number(entries, "approval.granted"), AUDREY)
    assert "granted by alice" in dict(a.lines)["approval approval-tool-call-031"]
    last = as_of(RUN, entries, len(entries), AUDREY)
    assert dict(last.lines) == snapshot(s.s, AUDREY) and last.pending == ()
    assert last.view is not None and last.view["status"] == "completed"


def test_the_lost_response_is_pending_until_reconciled() -> None:
    s, entries = _refund()
    lost = as_of(RUN, entries, _number(entries, "tool.call.result_unknown"), OLGA)
    assert lost.pending == ("tool-call-031: refund on order-001, result unknown",)
    assert any(c.key == "call tool-call-031" and "result unknown" in c.after for c in lost.changes)
    settled = as_of(RUN, entries, _number(entries, "tool.call.reconciled"), OLGA)
    assert settled.pending == ()


def test_facts_that_do_not_start_with_the_run_say_why_they_do_not_replay() -> None:
    s, entries = _refund()
    a = as_of(RUN, entries[3:], 2, OLGA)
    assert "do not replay" in a.problem and "must be run.created" in a.problem and a.lines == ()
