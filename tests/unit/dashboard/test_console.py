"""The operator console's run page over the real app without a broker: the feeds are fed what
the run decider writes (state record, user view, the run's events as framed Avro records)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from console_support import expiry_story, reauthorizing_policy, refund_story
from decider_support import Scenario
from ops_support import PASSWORDS, write_users
from starlette.testclient import TestClient

from runfacts.dashboard.app import Dashboard, create_app
from runfacts.dashboard.console import inbox_table, run_console, runs_table
from runfacts.dashboard.feed import FactsFeed, FeedSettings, StateFeed, ViewFeed, decode_view
from runfacts.dashboard.runlist import ListQuery, inbox, row_of, run_list
from runfacts.dashboard.runpage import (
    CALLS_A_PAGE,
    FACTS_A_PAGE,
    RunPage,
    earlier_calls,
    earlier_facts,
    relative,
    run_page,
)
from runfacts.dashboard.session import LOGIN_CSRF_COOKIE, SessionSigner
from runfacts.ops.client import CommandClient
from runfacts.ops.views import Viewer
from runfacts.projections.user_view import publisher
from runfacts.schemas.codec import Codec
from runfacts.security.identity import hash_secret, load_users
from runfacts.settings import KafkaSettings
from runfacts.topics import TopicNames

T0 = datetime(2026, 11, 30, 9, 0, tzinfo=UTC)
REFUND, EXPIRED = "run-refund-1", "run-expired-1"


def _feeds(names: TopicNames, scenarios: dict[str, Scenario]) -> tuple[ViewFeed, ViewFeed, FactsFeed]:
    kafka = KafkaSettings(bootstrap_servers="127.0.0.1:1")
    views = ViewFeed(kafka, FeedSettings(names.user_view, decode_view))
    states = StateFeed(kafka, FeedSettings(names.state))
    facts = FactsFeed(kafka, FeedSettings(names.events))
    codec = Codec()
    for run, s in scenarios.items():
        for _topic, key, value in publisher(names.user_view)(s.s):
            views.apply(key, value)
        states.apply(run.encode(), s.s.model_dump_json().encode())
        for offset, event in enumerate(s.log):
            facts.add(run, offset, int(event.occurredAt.timestamp() * 1000), codec.encode(event))
    return views, states, facts


@pytest.fixture
def stories() -> dict[str, Scenario]:
    return {REFUND: Scenario().given(*refund_story(REFUND, T0)),
            EXPIRED: Scenario().given(*expiry_story(EXPIRED, T0))}


@pytest.fixture
def client(tmp_path: Path, stories: dict[str, Scenario]):
    names = TopicNames("dash-console")
    views, states, facts = _feeds(names, stories)
    users = write_users(tmp_path / "users.toml")
    with users.open("a") as f:
        f.write(f'[users.sam]\nroles = ["supervisor"]\npassword = "{hash_secret("sam-pw-1")}"\n')
        f.write(f'[users.audrey]\nroles = ["auditor"]\npassword = "{hash_secret("audrey-pw-1")}"\n')
    kafka = KafkaSettings(bootstrap_servers="127.0.0.1:1")
    d = Dashboard(views, states, load_users(users), SessionSigner(b"s" * 32), CommandClient(kafka, names),
                  policy=reauthorizing_policy(tmp_path / "policy.toml"), facts=facts)
    with TestClient(create_app(d, manage_feed=False), base_url="http://dash.test") as c:
        yield c


def _login(client: TestClient, user: str) -> None:
    token = client.get("/login").cookies[LOGIN_CSRF_COOKIE]
    password = PASSWORDS.get(user, f"{user}-pw-1")
    assert client.post("/login", data={"username": user, "password": password, "csrf": token},
                       follow_redirects=False).status_code == 303


def test_run_page_shows_lost_response_reconciliation_and_confirmed_verification_on_their_tracks(client):
    _login(client, "olga")

    page = client.get(f"/runs/{REFUND}").text

    call = page.split('data-call="tool-call-031"')[1]
    execution, verification = call.split('class="track track-execution"')[1].split('class="track track-verification"')
    assert 'data-step="result_unknown"' in execution and 'data-step="reconciling"' in execution
    assert 'data-step="reconciled"' in execution and "outcome found_completed" in execution
    assert 'data-step="confirmed_success"' in verification and "bank-statement-7" in verification
    assert 'data-step="result_unknown"' not in verification
    assert "response lost" in page and "Turn 1" in page  # plain words, grouped by turn


def test_run_page_never_shows_python_none_when_fields_are_missing(client):
    for user in ("olga", "alice", "sam"):
        _login(client, user)
        for run in (REFUND, EXPIRED):
            page = client.get(f"/runs/{run}").text
            assert "None" not in page, (user, run, page[page.find("None") - 200:page.find("None") + 50])


def test_operator_sees_idempotency_key_and_tenant_but_support_agent_sees_neither(client):
    _login(client, "olga")
    operator = client.get(f"/runs/{REFUND}").text
    _login(client, "alice")
    agent = client.get(f"/runs/{REFUND}").text

    assert 'class="idempotency-key"' in operator and "refund:order-001:" in operator
    assert 'class="idempotency-key"' not in agent and "refund:order-001:" not in agent
    for personal in ("customer-42", "refund order-001", "Refund 42.00 EUR"):  # goal, user id, summary
        assert personal not in operator and personal not in agent


def test_expired_approval_offers_reauthorization_only_to_a_role_the_policy_lets_propose(client):
    seen = {}
    for user in ("sam", "olga", "alice"):
        _login(client, user)
        seen[user] = 'class="reauthorize"' in client.get(f"/runs/{EXPIRED}").text

    assert seen == {"sam": True, "olga": False, "alice": False}


def test_reauthorize_builds_a_proposal_of_the_same_arguments_under_a_new_call(stories):
    from runfacts.ops import control
    from runfacts.ops.control import Issue
    from runfacts.schemas.common import Actor

    state = stories[EXPIRED].s
    issue = Issue(Actor(subjectId="sam", roles=("supervisor",), authSource="dashboard"), "c-1", T0)
    command = control.reauthorize_command(state, "approval-tool-call-031", issue)
    s = stories[EXPIRED].given(command)

    assert command.payload.toolCallId == "tool-call-031"  # the decider names the new link
    assert s.s.approvals["approval-tool-call-031-r1"].status == "open"
    assert s.s.toolCalls["tool-call-031-r1"].argsHash == state.toolCalls["tool-call-031"].argsHash


def test_packaged_policy_offers_no_human_reauthorization_and_the_page_says_who_does(stories):
    from runfacts.processors.policy.access import allowed_command_types, load_policy
    from runfacts.schemas.common import Actor

    policy = load_policy()  # the packaged one: tool.call.propose is the agent's (docs/decider.md)
    for role in ("user", "support_agent", "supervisor", "operator", "auditor", "memory_reviewer"):
        actor = Actor(subjectId="x", roles=(role,), tenant="acme", authSource="dashboard")
        viewer = Viewer("x", (role,), allowed_command_types(policy, actor), "acme", True)
        page = run_page(stories[EXPIRED].s, [], viewer)
        row = next(a for a in page.approvals if a.approval_id == "approval-tool-call-031")
        assert (row.can_reauthorize, row.awaits_reauthorization) == (False, True), role
        html = run_console(page, "tok")
        assert "button class=\"reauthorize\"" not in html and "reauthorize-note" in html


def test_event_text_holding_html_is_shown_inert(stories):
    s = stories[REFUND]
    evil = '<img src=x onerror=alert(1)><script>alert(2)</script>'
    log = [e.model_copy(update={"payload": e.payload.model_copy(update={"target": evil})})
           if e.eventType == "tool.call.proposed" else e for e in s.log]
    from runfacts.client.outcomes import Entry
    entries = [Entry(i, e) for i, e in enumerate(log)]

    html = run_console(run_page(s.s, entries, Viewer("olga", ("operator",))), "tok")

    assert "<script>" not in html and "<img" not in html
    assert "&lt;img src=x onerror=alert(1)&gt;&lt;script&gt;" in html


def test_relative_time_reads_in_plain_units():
    assert relative(T0, T0.replace(second=12)) == "12 s ago"
    assert relative(T0, T0.replace(hour=12)) == "3 h ago"
    assert relative(T0.replace(minute=5), T0) == "in 5 min"


def test_timeline_groups_facts_by_turn_in_log_order(stories):
    s = stories[REFUND]
    from runfacts.client.outcomes import Entry

    turns = run_page(s.s, [Entry(i, e) for i, e in enumerate(s.log)], Viewer("olga", ("operator",))).turns

    assert [t.label for t in turns] == ["Before the first turn", "Turn 1", "Between turns"]
    assert turns[1].facts[0].event_type == "turn.started" and turns[1].facts[-1].event_type == "turn.completed"
    assert [f.offset for t in turns for f in t.facts] == list(range(len(s.log)))


def _many(n: int, tenants: tuple[str, ...] = ("acme", "globex")) -> list:
    base = Scenario().given(*refund_story("run-template", T0)).s
    return [row_of(base.model_copy(update={
        "runId": f"run-{i:05d}", "tenant": tenants[i % len(tenants)],
        "status": "waiting_for_review" if i % 10 == 0 else "running",
        "updatedAt": T0 + timedelta(seconds=i), "statusSince": T0 + timedelta(seconds=i)})) for i in range(n)]


def test_run_list_filters_searches_and_pages_ten_thousand_runs():
    states = _many(10_000)
    olga = Viewer("olga", ("operator",))
    now = T0 + timedelta(hours=5)

    first = run_list(states, olga, ListQuery(), now)
    last = run_list(states, olga, ListQuery(page=200), now)
    review = run_list(states, olga, ListQuery(needs_review=True, tenant="acme"), now)
    found = run_list(states, olga, ListQuery(q="run-0424"), now)

    assert first.total == 10_000 and first.pages == 200 and len(first.rows) == 50
    assert first.rows[0].run_id == "run-09999"  # newest change first
    assert last.rows[-1].run_id == "run-00000"
    assert review.total == 1000 and all(r.needs_review and r.tenant == "acme" for r in review.rows)
    assert [r.run_id for r in found.rows] == [f"run-0424{d}" for d in range(9, -1, -1)]
    stuck = run_list(states, olga, ListQuery(stuck="5h"), T0 + timedelta(hours=5, seconds=100))
    assert stuck.total == 100  # statusSince older than 5 h: the first 100 runs


def test_run_list_shows_a_support_agent_only_their_tenant_and_no_tenant_column():
    states = _many(100)
    alice = Viewer("alice", ("support_agent",), tenant="acme", tenant_bound=True)

    runs = run_list(states, alice, ListQuery(per_page=500), T0)
    page = runs_table(runs, T0)

    assert runs.total == 50 and all(r.tenant is None for r in runs.rows)
    assert "globex" not in page and "<th>tenant</th>" not in page
    assert "refund order-001" not in page  # the goal summary is personal: auditors only


def test_run_list_query_names_the_bad_parameter():
    with pytest.raises(ValueError, match="duration"):
        ListQuery.parse({"stuck": "soon"})
    with pytest.raises(ValueError, match="page"):
        ListQuery.parse({"page": "0"})
    assert ListQuery.parse({"review": "1", "q": "run-1", "page": "3"}).query_string(page=4) == "review=1&q=run-1&page=4"


def test_run_list_page_over_http_filters_and_never_shows_none(client):
    _login(client, "olga")

    page = client.get("/?status=completed").text
    bad = client.get("/?stuck=soon")

    assert REFUND in page and EXPIRED not in page and "None" not in page
    assert bad.status_code == 400 and "duration" in bad.text


def test_inbox_lists_approvals_the_role_may_decide_oldest_first_within_the_tenant():
    from decider_support import create, propose_refund

    def waiting(run: str, tenant: str, minutes: int):
        at = T0 + timedelta(minutes=minutes)
        return Scenario().given(create(run=run, tenant=tenant, at=at), propose_refund(run=run, at=at)).s

    waits = (("run-b", "acme", 5), ("run-a", "acme", 1), ("run-g", "globex", 0))
    states = [row_of(waiting(r, t, m)) for r, t, m in waits]
    alice = Viewer("alice", ("support_agent",), tenant="acme", tenant_bound=True)

    rows = inbox(states, alice)
    html = inbox_table(rows, T0 + timedelta(minutes=2), "tok")

    assert [r.run_id for r in rows] == ["run-a", "run-b"]  # oldest first; globex is not hers
    assert inbox(states, Viewer("olga", ("operator",))) == []  # operators do not decide refunds
    assert html.count('class="countdown"') == 2 and "14 min 00 s" in html  # run-a: 15 min TTL, 1 min gone
    assert "refund order-001 (high risk)" in html and "globex" not in html


def _audited(s: Scenario, topic: str = "dash-console.run.events") -> tuple[list, dict[int, bytes]]:
    from runfacts.projections.audit import reducer as audit
    from runfacts.projections.facts import Fact

    codec, head, records, events = Codec(), None, [], {}
    for offset, event in enumerate(s.log):
        value = codec.encode(event)
        events[offset] = value
        head, body = audit.step(head, Fact(topic, 0, offset, None, value[10:], value[2:10]))
        records.append(audit.decode(body))
    return records, events


def test_audit_chain_verifies_when_records_hash_the_events_in_the_log(stories):
    from runfacts.dashboard.auditcheck import chain_status

    records, events = _audited(stories[REFUND])

    status = chain_status(records, events, "dash-console.run.events")
    behind = chain_status(records[:-3], events, "dash-console.run.events")

    assert status.verified and status.sequence == len(records) == len(events) and status.unaudited == 0
    assert status.head == records[-1].recordHash
    assert behind.verified and behind.unaudited == 3  # the projector is behind: counted, not a failure


def test_audit_chain_does_not_verify_when_an_event_or_a_record_was_altered(stories):
    from runfacts.dashboard.auditcheck import chain_status

    records, events = _audited(stories[REFUND])
    altered = dict(events)
    altered[5] = altered[5][:-1] + bytes([altered[5][-1] ^ 1])
    dropped = records[:4] + records[5:]

    event_changed = chain_status(records, altered, "dash-console.run.events")
    record_missing = chain_status(dropped, events, "dash-console.run.events")

    assert not event_changed.verified
    assert "record 6" in event_changed.problem and "event altered" in event_changed.problem
    assert not record_missing.verified and "sequence 6 where 5 was due" in record_missing.problem


OLGA = Viewer("olga", ("operator",))


def _long_log(stories, turns: int, before_first: int = 0) -> list:
    """The refund story with its turn told `turns` times (turn numbers 1..turns) and
    `before_first` more facts before the first turn: as entries at offsets 7, 9, 11, …"""
    from runfacts.client.outcomes import Entry

    log = stories[REFUND].log
    head, turn, tail = log[:2], log[2:19], log[19:]
    padding = [log[11].model_copy(update={"eventId": f"pad-{i}"}) for i in range(before_first)]  # budget.debited
    told = []
    for n in range(1, turns + 1):
        for e in turn:
            numbered = ({"payload": e.payload.model_copy(update={"turnNumber": n})}
                        if e.eventType in ("turn.started", "turn.completed") else {})
            told.append(e.model_copy(update={"eventId": f"{e.eventId}-t{n}", **numbered}))
    return [Entry(7 + 2 * i, e) for i, e in enumerate(head + padding + told + tail)]


def _pages(state, entries, viewer=OLGA) -> list[list]:
    """Every page of facts, newest first, as the console unfolds them: the run page, then each
    older page by the boundary the previous one gave out."""
    page = run_page(state, entries, viewer)
    pages, earlier, before = [[t for t in page.turns]], page.earlier_facts, page.facts_before
    while earlier:
        older = earlier_facts(entries, viewer, before)
        assert older.turns, f"an empty page before offset {before} with {earlier} facts still folded"
        pages.append(list(older.turns))
        earlier, before = older.earlier, older.before
    return pages


def test_pages_of_facts_hold_whole_turns_and_every_fact_exactly_once(stories):
    entries = _long_log(stories, turns=40)  # 685 facts in turns of 17

    pages = _pages(stories[REFUND].s, entries)

    offsets = [f.offset for page in reversed(pages) for turn in page for f in turn.facts]
    assert offsets == [e.offset for e in entries]  # none missing, none twice, in log order
    assert all(0 < sum(len(t.facts) for t in page) <= FACTS_A_PAGE for page in pages)
    labels = [t.label for page in pages for t in page]
    assert not any("continued" in label for label in labels)  # turns of 17 fit: never cut
    assert labels.count("Turn 40") == 1 and labels.count("Turn 1") == 1
    assert all(turn.facts[0].event_type == "turn.started" for page in pages for turn in page
               if turn.label.startswith("Turn"))


def test_a_turn_longer_than_a_page_is_cut_and_its_newer_part_says_continued(stories):
    entries = _long_log(stories, turns=1, before_first=450)  # 452 facts before the first turn

    pages = _pages(stories[REFUND].s, entries)

    offsets = [f.offset for page in reversed(pages) for turn in page for f in turn.facts]
    assert offsets == [e.offset for e in entries]
    assert [[(t.label, len(t.facts)) for t in page] for page in pages] == [
        # 20 facts would be under half a page: the long group is cut to fill it
        [("Before the first turn (continued)", FACTS_A_PAGE - 20), ("Turn 1", 17), ("Between turns", 3)],
        [("Before the first turn (continued)", FACTS_A_PAGE)],
        [("Before the first turn", 452 - FACTS_A_PAGE - (FACTS_A_PAGE - 20))]]


def test_run_page_from_a_boundary_shows_every_fact_from_there_on_as_the_pinned_stream_asks(stories):
    entries = _long_log(stories, turns=40)
    first = run_page(stories[REFUND].s, entries, OLGA)

    grown = run_page(stories[REFUND].s, entries, OLGA, facts_from=first.facts_before)  # later: same boundary

    assert [f.offset for t in grown.turns for f in t.facts] == [e.offset for e in entries
                                                                  if e.offset >= first.facts_before]
    assert grown.earlier_facts == first.earlier_facts and grown.facts_before == first.facts_before


def _many_calls(state, count: int):
    call = state.toolCalls["tool-call-031"]
    calls = {f"call-{i:03d}": call.model_copy(update={"toolCallId": f"call-{i:03d}"}) for i in range(count)}
    return state.model_copy(update={"toolCalls": calls})


def test_pages_of_tool_calls_show_the_newest_and_every_older_call_exactly_once(stories):
    state = _many_calls(stories[REFUND].s, 3 * CALLS_A_PAGE + 5)

    page: RunPage = run_page(state, [], OLGA)
    seen, earlier, before = [[c.tool_call_id for c in page.calls]], page.earlier_calls, page.calls_before
    while earlier:
        older = earlier_calls(state, [], OLGA, before)
        seen.insert(0, [c.tool_call_id for c in older.calls])
        earlier, before = older.earlier, older.before

    assert len(seen[-1]) == CALLS_A_PAGE and seen[-1][-1] == "call-064"
    assert [c for part in seen for c in part] == list(state.toolCalls)
    html = run_console(page, "tok")
    assert 'href="/runs/run-refund-1/calls?before=call-045"' in html and "(45 more)" in html


def test_older_pages_are_fragments_redacted_by_role_and_pages_without_the_script(client):
    seen = {}
    for user in ("olga", "alice", "audrey"):
        _login(client, user)
        facts = client.get(f"/runs/{REFUND}/facts?before=100000", headers={"X-Fragment": "1"})
        calls = client.get(f"/runs/{REFUND}/calls?before=none", headers={"X-Fragment": "1"})
        assert facts.status_code == calls.status_code == 200, (user, facts.text, calls.text)
        assert facts.text.startswith('<section class="turn">') and "<html" not in facts.text
        seen[user] = (facts.text, calls.text)

    assert "customer-42" in seen["audrey"][0]  # auditors read personal fields
    for user in ("olga", "alice"):
        assert "customer-42" not in seen[user][0] and "[redacted]" in seen[user][0], user
    assert 'class="idempotency-key"' in seen["olga"][1] and 'class="idempotency-key"' not in seen["alice"][1]
    plain = client.get(f"/runs/{REFUND}/facts?before=100000")  # a link followed without the script
    assert plain.text.startswith("<!doctype html>") and "earlier facts" in plain.text
    assert client.get(f"/runs/{REFUND}/facts?before=soon").status_code == 400
    assert client.get("/runs/run-nobody/facts?before=9").status_code == 404
    _login(client, "eve")  # a user who owns no such run
    assert client.get(f"/runs/{REFUND}/facts?before=100000").status_code == 404
