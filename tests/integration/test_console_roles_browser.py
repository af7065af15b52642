"""Issue 39: the console as the support agent, the operator, the auditor and the end user see it,
in real headless Chromium over the real broker and the real run decider (one deployment, one
dashboard and one browser for the whole module: each test opens its own page).

The runs are sent as a real client sends them: personal fields sealed and pseudonymised under
a key table the dashboard reads (`keys`), so what an auditor reads is revealed by the
dashboard and what the others read is trimmed. Every test saves a screenshot of each page it
checks under artifacts/dashboard/ (gitignored); `_fits` holds the 1,280 px layout.
"""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer
from console_support import PEOPLE, password
from dashboard_support import chromium, login, screenshot, serve_dashboard, tab
from decider_support import AGENT, SUPPORT, claim, command, create, failed, propose_lookup, resume
from engine_support import EngineThread, settings
from ops_support import Deployment

from runfacts.partitioning import partition_for
from runfacts.privacy import KeyTable, protect
from runfacts.privacy.envelope import subject_ref
from runfacts.privacy.keys import new_privacy_keys_json, parse_privacy_keys, random_nonce
from runfacts.processors.policy.display import render
from runfacts.processors.policy.retry import args_hash, idempotency_key
from runfacts.schemas import commands as cmd
from runfacts.schemas.codec import Codec
from runfacts.schemas.common import BudgetAmounts
from runfacts.security.identity import hash_secret
from runfacts.workers import projector as projector_app

pytestmark = pytest.mark.integration

KEYS = parse_privacy_keys(new_privacy_keys_json("console-kek-1"))
REFUND_SCHEMA = {"type": "object", "properties": {
    "orderId": {"type": "string"}, "amountMinor": {"type": "integer", "unit": "cents"},
    "currency": {"type": "string"}, "note": {"type": "string", "pii": True}}}
CUSTOMER, ERASED_CUSTOMER = "customer-42", "customer-99"
WIDTH = 1280


def _refund(call: str, amount: int, run: str, at: datetime) -> cmd.ProposeToolCall:
    arguments = {"orderId": "order-5001", "amountMinor": amount, "currency": "EUR", "note": "customer phoned twice"}
    return command(cmd.ProposeToolCall, AGENT, run=run, at=at, toolCallId=call, capabilityId="payments.refund",
                   argsHash=args_hash(arguments), argsRef=f"args/{call}", target="order-5001", action="refund",
                   risk="high", summary=f"Refund {amount / 100:.2f} EUR for order-5001",
                   display=render(arguments, REFUND_SCHEMA))


def _people(path: Path) -> Path:
    people = {**PEOPLE, CUSTOMER: ("user", "acme")}
    lines = []
    for name, (role, tenant) in people.items():
        lines += [f'[users."{name}"]', f'roles = ["{role}"]', f'password = "{hash_secret(password(name))}"']
        lines += [f'tenant = "{tenant}"'] if tenant else []
    path.write_text("\n".join(lines) + "\n")
    return path


@pytest.fixture(scope="module")
def world(kafka_bootstrap: str, tmp_path_factory: pytest.TempPathFactory):
    """Three runs of tenant acme, sealed as a client seals them:
    - ask: refund 59.90 EUR proposed, rejected, proposed again at 49.90 EUR (open approval);
    - fail: a lookup that failed for good with the provider's words;
    - erased: a run whose customer was erased (their keys tombstoned);
    - parent: a run that started child run `child` with a sub-budget (issue 35 item 2)."""
    tmp = tmp_path_factory.mktemp("console-roles")
    unique = uuid.uuid4().hex[:10]
    dep = Deployment.create(kafka_bootstrap, f"roles{unique}")
    engine = EngineThread(dep.decider(), settings(kafka_bootstrap, tmp / "state", f"roles-{unique}")).start()
    projector = EngineThread(projector_app(prefix=dep.names.prefix),
                             settings(kafka_bootstrap, tmp / "projector", f"roles-projector-{unique}")).start()
    table = KeyTable(KEYS, lambda key, value: None)
    runs = {"ask": f"run-ask-{unique}", "fail": f"run-fail-{unique}", "erased": f"run-erased-{unique}",
            "orphan": f"run-orphan-{unique}", "parent": f"run-parent-{unique}", "child": f"run-child-{unique}"}

    def sealed(*commands: Any, subject: str = CUSTOMER) -> None:
        dep.send(*(protect(c, table, random_nonce, subject=c.payload.userId if isinstance(c, cmd.CreateRun)
                           else table.pseudonym(subject)) for c in commands))

    now = datetime.now(UTC)
    ask, fail, gone = runs["ask"], runs["fail"], runs["erased"]
    sealed(create(run=ask, at=now, tenant="acme"),
           command(cmd.StartTurn, AGENT, run=ask, at=now, turnId=f"{ask}-t1"),
           _refund("tool-call-1", 5990, ask, now),
           resume("reject", "approval-tool-call-1", SUPPORT, args_hash_=_refund("x", 5990, ask, now).payload.argsHash,
                  run=ask, at=now))
    dep.wait_state(ask, lambda s: "approval-tool-call-1" in s.approvals
                   and s.approvals["approval-tool-call-1"].status == "rejected")
    sealed(_refund("tool-call-2", 4990, ask, now))
    lookup_key = idempotency_key(fail, "lookup", "order-001", args_hash({"orderId": "order-001"}))
    sealed(create(run=fail, at=now, tenant="acme"), propose_lookup(run=fail, at=now),
           claim("tool-call-010", key=lookup_key, run=fail, at=now),
           failed("tool-call-010", retryable=False, error="refused", run=fail, at=now,
                  message="amount above 1000000"))
    erased_create = create(run=gone, at=now, tenant="acme")
    erased_create = erased_create.model_copy(update={"payload": erased_create.payload.model_copy(
        update={"userId": ERASED_CUSTOMER, "goalSummary": "close the account of customer-99"})})
    sealed(erased_create, subject=ERASED_CUSTOMER)
    sealed(create(run=runs["orphan"], at=now, tenant="acme"), propose_lookup(run=runs["orphan"], at=now))
    sealed(create(BudgetAmounts(toolCalls=5, steps=50), run=runs["parent"], at=now, tenant="acme"),
           command(cmd.StartChildRun, AGENT, run=runs["parent"], at=now, childRunId=runs["child"],
                   goalRef="goal-child", goalSummary="collect evidence", budget=BudgetAmounts(toolCalls=2, steps=10)))
    dep.wait_state(ask, lambda s: "approval-tool-call-2" in s.approvals)
    dep.wait_state(fail, lambda s: s.toolCalls["tool-call-010"].execution == "failed")
    dep.wait_state(gone, lambda s: s.status == "running")
    dep.wait_state(runs["orphan"], lambda s: s.toolCalls.get("tool-call-010") is not None)
    dep.wait_state(runs["child"], lambda s: s.parentRunId == runs["parent"])
    table.erase(subject_ref(ERASED_CUSTOMER, KEYS))
    users = _people(tmp / "users.toml")
    from console_support import reauthorizing_policy

    policy = reauthorizing_policy(tmp / "policy.toml")
    with serve_dashboard(dep, users, policy=policy, keys=table.view, orphan_after=timedelta(0)) as base:
        yield dep, base, runs
    engine.stop()
    projector.stop()


@pytest.fixture(scope="module")
def browser():
    with chromium() as launched:
        yield launched


@pytest.fixture
def page(browser: Any):
    with tab(browser, WIDTH) as opened:
        yield opened


def _as(page: Any, base: str, user: str) -> None:
    login(page, base, user, password(user))


def _fits(page: Any, name: str) -> None:
    """The page fits 1,280 px (no horizontal scroll), and is saved as a screenshot."""
    width = page.evaluate("document.documentElement.scrollWidth")
    screenshot(page, name)
    assert width <= WIDTH, f"{name}: {width} px wide"


def _run(page: Any, base: str, run: str) -> None:
    page.goto(f"{base}/runs/{run}")
    page.locator("#console").wait_for(timeout=15_000)


# --- 1. the approver sees the arguments, who asked and why, and what changed -----------------------

def test_support_agent_sees_the_arguments_who_asked_why_and_the_change_in_banner_and_inbox(world, page):
    dep, base, runs = world
    _as(page, base, "alice")
    _run(page, base, runs["ask"])
    banner = page.locator("#approval-banner")
    arguments = banner.locator("#approval-arguments").inner_text()
    assert "amountMinor = 4990 cents" in arguments and "currency = \"EUR\"" in arguments
    assert "note = [personal] (personal)" in arguments  # the personal argument masked for her
    assert "amountMinor = 4990 cents (was 5990 cents)" in arguments  # what changed since the rejected one
    assert "agent via agent-harness" in banner.locator("#approval-asked-by").inner_text()
    assert "support agent's approval" in banner.locator("#approval-why").inner_text()
    _fits(page, "roles-run-page-ask-support-agent")

    page.goto(f"{base}/approvals")
    row = page.locator(f'#inbox tr[data-run="{runs["ask"]}"]')
    row.wait_for(timeout=15_000)
    assert "amountMinor = 4990 cents" in row.inner_text() and "support agent's approval" in row.inner_text()
    _fits(page, "roles-inbox-support-agent")


def test_auditor_reads_the_personal_argument_and_who_asked_revealed(world, page):
    dep, base, runs = world
    _as(page, base, "audrey")
    _run(page, base, runs["ask"])
    arguments = page.locator('#approvals tr[data-approval="approval-tool-call-2"]').inner_text()
    assert "customer phoned twice" in arguments and "rfe1." not in arguments
    assert "agent-harness (agent via agent-harness)" in arguments
    _fits(page, "roles-run-page-ask-auditor")


# --- 7. a stale page's Approve is refused ----------------------------------------------------------

def test_a_stale_pages_approve_is_refused_with_stale_version(world, page):
    dep, base, runs = world
    _as(page, base, "alice")
    _run(page, base, runs["ask"])
    version = page.locator("#run").get_attribute("data-version")
    shown = page.locator('#approval-banner input[name="version"]')
    assert shown.get_attribute("value") == version  # the form carries the version on screen
    page.evaluate(f"document.querySelector('#approval-banner input[name=version]').value = '{int(version) - 1}'")

    page.click("#approve")
    page.locator('#command-status[data-outcome="rejected"]').wait_for(timeout=30_000)
    assert "stale_version" in page.locator("#command-status").inner_text()
    state = dep.state(runs["ask"])
    assert state is not None and state.approvals["approval-tool-call-2"].status == "open"

    page.goto(f"{base}/approvals")  # the inbox's rows carry the run's version too
    row = page.locator(f'#inbox tr[data-run="{runs["ask"]}"]')
    assert row.locator('input[name="version"]').get_attribute("value") == version
    page.evaluate(f"document.querySelector('#inbox tr[data-run=\"{runs['ask']}\"] input[name=version]')"
                  f".value = '{int(version) - 1}'")
    row.locator("button.approve").click()
    page.locator('#command-status[data-outcome="rejected"]').wait_for(timeout=30_000)
    assert "stale_version" in page.locator("#command-status").inner_text()


# --- 3. who proposed, who decided ------------------------------------------------------------------

@pytest.mark.parametrize("user, proposer, rejecter", [
    ("olga", "[redacted] (agent via agent-harness)", "[redacted] (support_agent, user via dashboard)"),
    ("audrey", "agent-harness (agent via agent-harness)", "alice (support_agent, user via dashboard)")])
def test_the_timeline_names_who_caused_each_fact(world, page, user, proposer, rejecter):
    dep, base, runs = world
    _as(page, base, user)
    _run(page, base, runs["ask"])
    proposed = page.locator('#timeline tr[data-event="tool.call.proposed"]').first
    assert proposed.locator(".actor").inner_text() == proposer
    rejected = page.locator('#timeline tr[data-event="approval.rejected"]')
    assert rejected.locator(".actor").inner_text() == rejecter
    assert "rejected by " + rejecter in rejected.inner_text()
    _run(page, base, runs["fail"])
    assert page.locator('#timeline tr[data-event="tool.call.failed"] .actor').inner_text() == "dispatcher"
    assert page.locator('#timeline .actor:text-is("run-decider")').count() == 0
    _fits(page, f"roles-timeline-{user}")


# --- 4. a failed call's error with its attempts ----------------------------------------------------

@pytest.mark.parametrize("user, said", [("olga", "[withheld"), ("audrey", "amount above 1000000"),
                                        ("alice", "[withheld")])
def test_a_failed_calls_error_is_shown_with_its_attempt(world, page, user, said):
    dep, base, runs = world
    _as(page, base, user)
    _run(page, base, runs["fail"])
    failure = page.locator('.call[data-call="tool-call-010"] tr.failure[data-attempt="1"]')
    assert "refused" in failure.inner_text() and "no" in failure.inner_text()
    assert failure.locator(".error-detail").inner_text().startswith(said)
    _fits(page, f"roles-failed-call-{user}")


# --- 2. the auditor reads the revealed run, not ciphertext -----------------------------------------

def test_auditor_reads_goal_approver_actors_and_errors_revealed(world, page):
    dep, base, runs = world
    _as(page, base, "audrey")
    _run(page, base, runs["ask"])
    assert page.locator("#goal-summary").inner_text() == "refund order-001"
    assert page.locator("#goal").inner_text() == "refund order-001"
    decided = page.locator('#approvals tr[data-approval="approval-tool-call-1"] .decided-by').inner_text()
    assert decided == "by alice"
    text = page.locator("main").inner_text()
    assert "rfe1." not in text and "rfp1." not in text, text
    _run(page, base, runs["fail"])
    assert "amount above 1000000" in page.locator("#timeline").inner_text()
    assert "rfe1." not in page.locator("main").inner_text()


# --- 6. the end user's list ------------------------------------------------------------------------

def test_end_user_lists_their_own_run(world, page):
    dep, base, runs = world
    _as(page, base, CUSTOMER)
    page.locator(f'#runs tr[data-run="{runs["ask"]}"]').wait_for(timeout=15_000)
    assert page.locator(f'#runs tr[data-run="{runs["erased"]}"]').count() == 0  # not theirs
    _fits(page, "roles-run-list-end-user")
    _run(page, base, runs["ask"])
    _fits(page, "roles-run-page-end-user")


# --- issue 35.2: the console shows the tree of child runs ------------------------------------------

def test_a_parents_page_shows_its_child_run_with_its_budget_and_the_child_links_back(world, page):
    dep, base, runs = world
    _as(page, base, "olga")
    _run(page, base, runs["parent"])
    child = page.locator(f'#child-runs li[data-child="{runs["child"]}"]')
    said = child.inner_text()
    assert "running · not reported yet · budget 10 steps, 2 tool calls (reserved) · used nothing" in said, said
    assert "0 of 50 (10 reserved for child runs)" in page.locator("#budget").inner_text()
    assert f"Started child run {runs['child']} with budget 10 steps, 2 tool calls" in page.locator(
        "#timeline").inner_text()
    _fits(page, "roles-parent-tree-operator")
    child.locator(f'a[href="/runs/{runs["child"]}"]').click()
    page.locator("#parent-run").wait_for(timeout=15_000)
    assert page.locator("#parent-run a").get_attribute("href") == f"/runs/{runs['parent']}"
    assert f"Started as a child of run {runs['parent']}" in page.locator("#timeline").inner_text()
    _fits(page, "roles-child-page-operator")


# --- 9. erasure is visible -------------------------------------------------------------------------

@pytest.mark.parametrize("user", ["audrey", "olga"])
def test_an_erased_subject_is_said_in_words(world, page, user):
    dep, base, runs = world
    _as(page, base, user)
    _run(page, base, runs["erased"])
    status = page.locator("#subject-status")
    assert status.get_attribute("data-subject") == "erased"
    assert "[erased]" in status.inner_text()
    if user == "audrey":
        assert page.locator("#goal-summary").inner_text() == "[erased]"
    _run(page, base, runs["ask"])
    assert page.locator("#subject-status").get_attribute("data-subject") == "protected"
    _fits(page, f"roles-erased-{user}")


# --- 5. health lag counts records, not transaction markers -----------------------------------------

def test_health_shows_no_lag_for_the_projector_at_idle(world, page):
    dep, base, runs = world
    _as(page, base, "olga")
    lags: list[int] = []
    for _ in range(30):  # the projector commits as it goes: wait until it has caught up
        page.goto(f"{base}/health")
        page.locator("#lag").wait_for(timeout=15_000)
        rows = page.locator('#lag tr[data-processor="projector"]')
        lags = [int(rows.nth(i).locator(".lag").inner_text()) for i in range(rows.count())]
        if lags and sum(lags) == 0:
            break
        page.wait_for_timeout(1000)
    assert lags == [0, 0, 0], lags  # a committed transaction's marker is no record to process
    _fits(page, "roles-health-operator")


# --- issue 35.5: health per run and fleet-wide ------------------------------------------------------

def test_health_lists_the_orphaned_call_and_the_fleets_figures(world, page):
    dep, base, runs = world
    _as(page, base, "olga")
    page.goto(f"{base}/health")
    row = page.locator(f'#run-health tr[data-run="{runs["orphan"]}"]')
    assert row.locator(".orphans").inner_text() == "1"  # authorized, never claimed: no dispatcher runs here
    assert "facts" in row.locator(".checkpoint-lag").inner_text()
    orphans = int(page.locator('#fleet [data-figure="orphaned calls"] strong').inner_text())
    assert orphans >= 1
    assert page.locator('#fleet [data-figure="policy denials"] strong').inner_text() == "none"
    _as(page, base, "alice")
    page.goto(f"{base}/health")
    assert page.locator("#not-allowed").count() == 1


# --- 8. dead letters: run key, payload preview, no redrive of an undecodable letter -----------------

def test_dead_letters_show_the_run_and_payload_and_refuse_an_undecodable_redrive(world, page):
    dep, base, runs = world
    good_run, bad_run = f"run-dl-{uuid.uuid4().hex[:8]}", f"run-garbled-{uuid.uuid4().hex[:8]}"
    producer = Producer(dep.kafka.client_config())
    for run, value, error in ((good_run, Codec().encode(create(run=good_run, at=datetime.now(UTC), tenant="acme")),
                               "decider was down (test)"), (bad_run, b"\x00\x01not avro", "does not decode (test)")):
        key = run.encode()
        producer.produce(dep.names.dlq, value, key, headers=[
            ("dlq.topic", dep.names.commands.encode()), ("dlq.partition", str(partition_for(key, 3)).encode()),
            ("dlq.offset", b"0"), ("dlq.schema", b"runfacts.commands.CreateRun"), ("dlq.schemaVersion", b"1"),
            ("dlq.error", error.encode()), ("dlq.app", b"run-decider")])
    producer.flush(10)
    _as(page, base, "olga")
    page.goto(f"{base}/dead-letters")
    good = page.locator(f'#letters tr[data-run="{good_run}"]')
    good.wait_for(timeout=15_000)
    assert "run.create" in good.locator(".payload").inner_text()
    assert CUSTOMER not in good.inner_text()  # the preview is trimmed like any page for operators
    bad = page.locator(f'#letters tr[data-run="{bad_run}"]')
    assert "does not decode" in bad.locator(".payload").inner_text()
    _fits(page, "roles-dead-letters-operator")
    before = page.locator("#letters tr[data-position]").count()

    response = page.request.post(f"{base}/dead-letters/redrive", form={
        "position": bad.get_attribute("data-position") or "", "csrf": _csrf(page)})
    assert response.status == 409 and "does not decode" in response.text()
    page.wait_for_timeout(2000)  # a redrive would have gone to the decider and back as a new letter
    page.goto(f"{base}/dead-letters")
    assert page.locator("#letters tr[data-position]").count() == before


def _csrf(page: Any) -> str:
    return page.locator('input[name="csrf"]').first.get_attribute("value") or ""


# --- 10. layout: times with their zone, durations in words -----------------------------------------

def test_times_carry_their_zone_and_states_read_as_words(world, page):
    dep, base, runs = world
    _as(page, base, "alice")
    page.locator(f'#runs tr[data-run="{runs["ask"]}"]').wait_for()
    assert "waiting for approval" in page.locator(f'#runs tr[data-run="{runs["ask"]}"]').inner_text()
    _run(page, base, runs["ask"])
    assert page.locator("#run-status").inner_text() == "waiting for approval"
    assert "waiting_for_approval" not in page.locator("main").inner_text()
    assert " UTC" in page.locator("#approval-banner").inner_text()
    stamps = page.locator("#timeline time")
    assert stamps.count() > 0 and all(" UTC" in stamps.nth(i).inner_text() for i in range(stamps.count()))
