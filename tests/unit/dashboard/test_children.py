"""The run page of a parent shows its child runs as a tree (issue 35 item 2: "the console shows
the tree"), a child's page links back to its parent, and the facts of child runs, evidence and
paused tools read in plain words on the timeline, never as raw event types. Pure: the runs are
decided on an in-memory log (`decider/test_children.py`, `Tree`), the page rendered from their states."""

from __future__ import annotations

from datetime import UTC, datetime

from decider_support import AGENT, DISPATCHER, Scenario, command, create, propose_lookup

from runfacts.client.outcomes import Entry
from runfacts.dashboard.console import run_console
from runfacts.dashboard.runpage import NONE_TEXT, run_page
from runfacts.ops.views import Viewer
from runfacts.processors.decider.state import RunState
from runfacts.schemas import commands as cmd
from runfacts.schemas.common import BudgetAmounts

from ..decider.test_children import CHILD, H1, H2, OTHER, PARENT, Tree, debit, evidence, finish, start, tree

OLGA = Viewer("olga", ("operator",))
GRAND = "run-grandchild-1"


def _family() -> Tree:
    """A parent with two children: CHILD running (it spent 2 steps) with a grandchild of its own,
    OTHER completed after 3 steps, offering ev-2 and evidence ev-1 with another hash than the parent's."""
    grand = command(cmd.StartChildRun, AGENT, run=CHILD, childRunId=GRAND, goalRef="goal-grand",
                    goalSummary="dig deeper", budget=BudgetAmounts(toolCalls=1, steps=4))
    return tree().send(evidence(PARENT, "ev-1", H1), start(CHILD, toolCalls=2, steps=10), grand,
                       debit(CHILD, steps=2), start(OTHER, toolCalls=1, steps=5), evidence(OTHER, "ev-1", H2),
                       evidence(OTHER, "ev-2", H1), debit(OTHER, steps=3), finish(OTHER))


def _entries(t: Tree, run: str) -> list[Entry]:
    return [Entry(i, e) for i, e in enumerate(t.events[run])]


def _lookup(t: Tree):
    return lambda run: t.states.get(run)


def test_parent_page_shows_each_child_with_its_status_reserved_and_used_budget_and_its_own_children() -> None:
    t = _family()
    page = run_page(t[PARENT], _entries(t, PARENT), OLGA, lookup=_lookup(t))

    running, done = page.children
    assert (running.run_id, running.status, running.run_status, running.released) == (CHILD, "requested", "running",
                                                                                      False)
    assert running.reserved == "10 steps, 2 tool calls"
    assert running.used == "2 steps"  # live: what its own state says it spent so far
    assert [(g.run_id, g.reserved, g.run_status) for g in running.children] == [(GRAND, "4 steps, 1 tool call",
                                                                                 "running")]
    assert (done.run_id, done.status, done.released, done.used, done.children) == (OTHER, "completed", True,
                                                                                  "3 steps", ())
    assert page.parent is None


def test_console_renders_the_tree_with_links_nested_under_their_parent_and_a_child_links_back() -> None:
    t = _family()
    html = run_console(run_page(t[PARENT], _entries(t, PARENT), OLGA, lookup=_lookup(t)), "csrf")

    assert '<h2>Child runs</h2><ul id="child-runs"' in html
    child_item = html[html.index(f'<li data-child="{CHILD}"'):]
    assert child_item.index(f'<li data-child="{GRAND}"') < child_item.index("</li>")  # nested inside CHILD's item
    for run in (CHILD, OTHER, GRAND):
        assert f'<a href="/runs/{run}">{run}</a>' in html
    assert "running · <span class=\"state-requested\">not reported yet</span> · budget 10 steps, 2 tool calls " \
           "(reserved) · used 2 steps" in html
    assert "reported completed</span> · budget 5 steps, 1 tool call (released) · used 3 steps" in html
    assert "3 of 50 (10 reserved for child runs)" in html

    child_html = run_console(run_page(t[CHILD], _entries(t, CHILD), OLGA, lookup=_lookup(t)), "csrf")
    assert f'child run of <a href="/runs/{PARENT}">{PARENT}</a>' in child_html
    assert f'<li data-child="{GRAND}"' in child_html


def test_without_other_runs_states_the_tree_is_one_level_from_the_parents_own_state() -> None:
    t = _family()
    page = run_page(t[PARENT], _entries(t, PARENT), OLGA)

    assert [(c.run_id, c.run_status, c.children) for c in page.children] == [(CHILD, NONE_TEXT, ()),
                                                                             (OTHER, NONE_TEXT, ())]
    assert page.children[0].used == "nothing"  # the parent knows a live child's spending only at its end


def test_a_run_that_is_its_own_descendant_in_a_corrupt_lookup_is_not_walked_forever() -> None:
    t = _family()
    looped = t[GRAND].model_copy(update={"children": {PARENT: t[PARENT].children[CHILD].model_copy(
        update={"childRunId": PARENT})}})
    states: dict[str, RunState] = {**t.states, GRAND: looped}
    page = run_page(t[PARENT], _entries(t, PARENT), OLGA, lookup=states.get)

    grand = page.children[0].children[0]
    assert [(c.run_id, c.children) for c in grand.children] == [(PARENT, ())]


def _words(entries: list[Entry], page_state: RunState) -> list[tuple[str, str]]:
    page = run_page(page_state, entries, OLGA)
    return [(f.event_type, f.words) for turn in page.turns for f in turn.facts]


def test_child_run_and_evidence_facts_read_in_plain_words_not_as_event_types() -> None:
    t = _family()
    said = _words(_entries(t, PARENT), t[PARENT]) + _words(_entries(t, CHILD), t[CHILD])
    words = {w for _type, w in said}

    assert f"Started child run {CHILD} with budget 10 steps, 2 tool calls" in words
    assert f"Started as a child of run {PARENT}" in words
    assert f"Child {OTHER} completed; used 3 steps; released 2 steps, 1 tool call" in words
    assert "Evidence ev-1 appended (hash sha256:111111111111…)" in words
    assert f"Merged 1 evidence item(s) from child {OTHER}" in words
    assert (f"Evidence ev-1 conflicts: {OTHER} offers hash sha256:222222222222…, {PARENT} holds "
            "sha256:111111111111…; nothing overwritten, needs review") in words
    assert not [(kind, w) for kind, w in said if w == kind]  # no fact left as its raw type


def test_a_held_call_reads_waiting_cap_paused_by_who_why() -> None:
    hold = command(cmd.ReportToolHeld, DISPATCHER, run="run-held-page", toolCallId="call-1", pauseId="evt-pause-1",
                   pausedBy="olga", reason="provider incident", pausedAt=datetime(2026, 12, 6, tzinfo=UTC))
    s = Scenario().given(create(run="run-held-page"), propose_lookup("call-1", run="run-held-page"), hold)
    said = dict(_words([Entry(i, e) for i, e in enumerate(s.log)], s.s))

    assert said["tool.call.held"] == "Waiting: orders.lookup paused by olga: provider incident (call-1 held)"


def test_a_child_in_review_reads_as_reported_needs_review_on_the_parents_tree_and_timeline() -> None:
    t = tree().send(start(toolCalls=2, steps=10), debit(CHILD, steps=11))
    page = run_page(t[PARENT], _entries(t, PARENT), OLGA, lookup=_lookup(t))
    html = run_console(page, "csrf")

    row = page.children[0]
    assert (row.status, row.run_status, row.released) == ("needs_review", "needs_review", False)
    assert (f'data-status="needs_review"><a href="/runs/{CHILD}">{CHILD}</a> needs review · '
            '<span class="state-needs_review">reported needs review</span>') in html
    said = [f.words for turn in page.turns for f in turn.facts]
    assert said[-1] == f"Child {CHILD} needs review: budget exceeded", said
