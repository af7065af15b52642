"""The run's story header (issue 39), pure: one paragraph from the run's facts, trimmed by role,
over several histories (approved and settled after a lost response, rejected, expired,
compensated, a parent with a child run, more calls than it tells)."""

from __future__ import annotations

from datetime import UTC, datetime

from console_support import expiry_story, refund_story
from decider_support import Scenario, create, propose_refund, resume

from runfacts.client.outcomes import Entry
from runfacts.dashboard.console import run_console, story_header
from runfacts.dashboard.html import run_fragment
from runfacts.dashboard.retell.story import clock
from runfacts.dashboard.runpage import run_page, run_story
from runfacts.ops.views import Viewer, page_view, view_of
from runfacts.processors.decider.commands.compensation import compensation_call_id

from ..decider.test_children import CHILD, PARENT, finish, start, tree
from ..decider.test_compensation import cancel, claim, done, two_effects

T0 = datetime(2026, 12, 6, 10, 40, tzinfo=UTC)
OLGA, ALICE = Viewer("olga", ("operator",)), Viewer("alice", ("support_agent",))
AUDREY, USER = Viewer("audrey", ("auditor",)), Viewer("customer-42", ("user",))


def _entries(log: list) -> list[Entry]:
    return [Entry(i, e) for i, e in enumerate(log)]


def _told(s: Scenario, viewer: Viewer) -> str:
    return run_story(_entries(s.log), viewer).text


def test_approved_refund_whose_response_was_lost_reads_as_one_sentence_per_role() -> None:
    s = Scenario().given(*refund_story("run-story-1", T0))
    approved = next(e for e in s.log if e.eventType == "approval.granted").occurredAt

    auditor = _told(s, AUDREY)
    assert (f"Refund 42.00 EUR for order-001 proposed by agent-harness, approved by alice at {clock(approved)}, "
            "sent, response lost, found completed at the provider, settled.") in auditor, auditor
    assert auditor.startswith("Goal «refund order-001» for customer-42.") and auditor.endswith("Run completed.")

    for viewer in (OLGA, ALICE, USER):  # no names, no summary, no goal: the roles and the action
        told = _told(s, viewer)
        assert ("Refund on order-001 proposed by an agent, approved by a support agent at "
                f"{clock(approved)}, sent, response lost, found completed at the provider, settled.") in told, told
        assert "alice" not in told and "42.00" not in told and "customer-42" not in told


def test_rejected_call_says_who_rejected_it_and_that_the_run_waits_for_the_next() -> None:
    s = Scenario().given(create(run="run-story-2", at=T0), propose_refund(run="run-story-2", at=T0),
                         resume("reject", run="run-story-2", at=T0))
    told = _told(s, AUDREY)
    assert f"proposed by agent-harness, rejected by alice at {clock(T0)}." in told, told
    assert "sent" not in told


def test_open_and_expired_approvals_are_told_with_their_deadline() -> None:
    waiting = Scenario().given(create(run="run-story-3", at=T0), propose_refund(run="run-story-3", at=T0))
    told = _told(waiting, OLGA)
    assert "waiting for a support agent's approval (until 10:55 UTC)." in told, told
    assert told.endswith("Paused: waiting for approval.")

    expired = Scenario().given(*expiry_story("run-story-4", T0))
    told = _told(expired, ALICE)
    assert "approved by a support agent at 10:40 UTC, approval expired at 10:55 UTC." in told, told
    assert "waiting for" not in told


def test_compensated_run_tells_each_undo_and_what_was_reversed() -> None:
    s = two_effects()
    s.given(cancel())
    first = compensation_call_id("charge-1")
    s.given(claim(s, first), done(first))
    second = compensation_call_id("reserve-1")
    s.given(claim(s, second), done(second))
    told = _told(s, OLGA)
    assert f"Charge on order-001 (orderId = \"order-001\", amountMinor = 4200) proposed by the agent, sent, " \
           f"completed, undone by {first}." in told, told
    assert told.endswith("Run compensated: reversed charge-1, reserve-1."), told


def test_parent_tells_its_child_and_the_child_its_parent() -> None:
    t = tree().send(start(CHILD), finish(CHILD))
    parent = run_story(_entries(t.events[PARENT]), OLGA).text
    assert f"Started child run {CHILD}." in parent and f"Child run {CHILD} completed." in parent, parent
    child = run_story(_entries(t.events[CHILD]), OLGA).text
    assert child.startswith(f"Child run of {PARENT}.") and child.endswith("Run completed."), child


def test_a_long_run_tells_its_newest_calls_and_counts_the_others() -> None:
    s = Scenario().given(*refund_story("run-story-5", T0))
    many = s.log[:2] + [e for i in range(8) for e in _renamed(s.log[2:9], f"call-{i}")]
    told = run_story(_entries(many), OLGA, calls_told=3)
    assert told.earlier_calls == 5 and "5 earlier tool calls not told here." in told.text, told.text
    assert told.text.count(" proposed by ") == 3


def _renamed(events: list, call: str) -> list:
    out = []
    for e in events:
        if hasattr(e.payload, "toolCallId"):
            e = e.model_copy(update={"payload": e.payload.model_copy(update={"toolCallId": call})})
        out.append(e)
    return out


def test_run_page_shows_the_story_first() -> None:
    s = Scenario().given(*refund_story("run-story-6", T0))
    page = run_page(s.s, _entries(s.log), ALICE)
    view = page_view(view_of(s.s, "user"), ALICE)
    html = run_fragment(view, "csrf", run_console(page, "csrf"), None, story_header(page))
    assert html.index("</h1>") < html.index('id="run-story"') < html.index('id="status-line"')
    assert "found completed at the provider, settled." in html
