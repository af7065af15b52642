"""Issue 39, the rest: the run's story header, the run as of any fact, search and filters on the
run list, who asked in the inbox, and an axe-core accessibility pass over every page and role;
in real headless Chromium over the real broker and the real run decider (one deployment, one
dashboard and one browser for the module; each test opens its own page).

axe-core is the copy `axe-playwright-python` (PyPI, dev extra) ships: it is evaluated in the
page by Playwright (not a <script>: the page's CSP forbids any but the dashboard's own). Every
test saves screenshots of the pages it checks under artifacts/dashboard/ (gitignored).
"""

from __future__ import annotations

import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest
from console_support import PEOPLE, password, refund_story
from dashboard_support import chromium, login, screenshot, serve_dashboard, tab
from decider_support import claim, create, failed, propose_lookup, propose_refund
from engine_support import EngineThread, settings
from ops_support import Deployment

from runfacts.processors.policy.retry import args_hash, idempotency_key
from runfacts.security.identity import hash_secret
from runfacts.workers import projector as projector_app

pytestmark = pytest.mark.integration

CUSTOMER, OTHER_CUSTOMER = "customer-42", "customer-7"
WIDTH = 1280


def _people(path: Path) -> Path:
    people = {**PEOPLE, CUSTOMER: ("user", "acme"), OTHER_CUSTOMER: ("user", "acme")}
    lines = []
    for name, (role, tenant) in people.items():
        lines += [f'[users."{name}"]', f'roles = ["{role}"]', f'password = "{hash_secret(password(name))}"']
        lines += [f'tenant = "{tenant}"'] if tenant else []
    path.write_text("\n".join(lines) + "\n")
    return path


@pytest.fixture(scope="module")
def world(kafka_bootstrap: str, tmp_path_factory: pytest.TempPathFactory):
    """Three runs of tenant acme: `refund` (customer-42: approved, response lost, found completed,
    settled), `fail` (customer-7: a lookup refused for good), `waiting` (customer-42: a refund
    waiting for a support agent)."""
    tmp = tmp_path_factory.mktemp("console-story")
    unique = uuid.uuid4().hex[:10]
    dep = Deployment.create(kafka_bootstrap, f"story{unique}")
    engine = EngineThread(dep.decider(), settings(kafka_bootstrap, tmp / "state", f"story-{unique}")).start()
    projector = EngineThread(projector_app(prefix=dep.names.prefix),
                             settings(kafka_bootstrap, tmp / "projector", f"story-projector-{unique}")).start()
    runs = {"refund": f"run-refund-{unique}", "fail": f"run-fail-{unique}", "waiting": f"run-waiting-{unique}"}
    now = datetime.now(UTC)
    dep.send(*refund_story(runs["refund"], now, tenant="acme"))
    fail = runs["fail"]
    created = create(run=fail, at=now, tenant="acme")
    created = created.model_copy(update={"payload": created.payload.model_copy(update={"userId": OTHER_CUSTOMER})})
    lookup_key = idempotency_key(fail, "lookup", "order-001", args_hash({"orderId": "order-001"}))
    dep.send(created, propose_lookup(run=fail, at=now), claim("tool-call-010", key=lookup_key, run=fail, at=now),
             failed("tool-call-010", retryable=False, error="refused", run=fail, at=now))
    dep.send(create(run=runs["waiting"], at=now, tenant="acme"), propose_refund(run=runs["waiting"], at=now))
    dep.wait_state(runs["refund"], lambda s: s.status == "completed")
    dep.wait_state(fail, lambda s: s.toolCalls["tool-call-010"].execution == "failed")
    dep.wait_state(runs["waiting"], lambda s: "approval-tool-call-031" in s.approvals)
    with serve_dashboard(dep, _people(tmp / "users.toml")) as base:
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


def _run(page: Any, base: str, run: str) -> None:
    page.goto(f"{base}/runs/{run}")
    page.locator("#console").wait_for(timeout=15_000)


def _fits(page: Any, name: str) -> None:
    width = page.evaluate("document.documentElement.scrollWidth")
    screenshot(page, name)
    assert width <= WIDTH, f"{name}: {width} px wide"


# --- 1. the story header ---------------------------------------------------------------------------

@pytest.mark.parametrize("user, told", [
    ("audrey", "Refund 42.00 EUR for order-001 proposed by agent-harness, approved by alice at "),
    ("alice", "Refund on order-001 proposed by an agent, approved by a support agent at "),
    (CUSTOMER, "Refund on order-001 proposed by an agent, approved by a support agent at ")])
def test_the_run_page_opens_with_its_story_trimmed_by_role(world, page, user, told):
    dep, base, runs = world
    _as(page, base, user)
    _run(page, base, runs["refund"])
    story = page.locator("#run-story").inner_text()
    assert story.startswith(told) or f" {told}" in story, story
    assert "sent, response lost, found completed at the provider, settled. Run completed." in story, story
    if user != "audrey":
        assert "alice" not in story and "42.00" not in story
    _fits(page, f"story-run-page-{user}")


# --- 2. the run as of any fact -----------------------------------------------------------------------

def test_the_timeline_links_each_fact_to_the_run_as_it_was_then(world, page):
    dep, base, runs = world
    _as(page, base, "olga")
    _run(page, base, runs["refund"])
    total = page.locator("#console").get_attribute("data-facts")
    granted = page.locator('#timeline tr[data-event="approval.granted"] a.as-of-link')
    number = int((granted.inner_text()).lstrip("#"))
    granted.click()
    page.wait_for_url(f"**/runs/{runs['refund']}?at={number}")
    section = page.locator("#as-of")
    assert f"as of fact {number} of {total}" in section.locator("h1").inner_text()
    assert page.locator("#as-of-fact").get_attribute("data-event") == "approval.granted"
    change = page.locator('#as-of-diff tr[data-key="approval approval-tool-call-031"]').inner_text()
    assert "open" in change and "granted by [redacted]" in change, change
    assert "tool-call-031: refund on order-001" in page.locator("#as-of-pending").inner_text()
    assert "#live" not in page.content() and page.locator("#live").count() == 0  # the past is not live
    _fits(page, "story-as-of-approval-operator")

    page.click("#as-of-next")
    page.wait_for_url(f"**?at={number + 1}")
    assert f"as of fact {number + 1} of {total}" in page.locator("#as-of h1").inner_text()
    page.locator("#as-of-range").fill(str(total))  # the slider: a plain GET form
    page.click("#as-of-go")
    page.wait_for_url(f"**?at={total}")
    assert page.locator("#as-of-pending").inner_text() == "none"
    assert "completed" in page.locator('#as-of-state tr[data-key="status"]').inner_text()
    response = page.goto(f"{base}/runs/{runs['refund']}?at=0")
    assert response is not None and response.status == 400
    assert f"1 to {total}" in page.locator("#as-of-error").inner_text()


def test_an_end_user_sees_their_own_run_as_of_a_fact_but_not_anyone_elses(world, page):
    dep, base, runs = world
    _as(page, base, CUSTOMER)
    page.goto(f"{base}/runs/{runs['refund']}?at=3")
    assert "as of fact 3 of" in page.locator("#as-of h1").inner_text()
    assert CUSTOMER not in page.locator("#as-of").inner_text().replace(f"signed in as {CUSTOMER}", "")
    _fits(page, "story-as-of-end-user")
    response = page.goto(f"{base}/runs/{runs['fail']}?at=1")
    assert response is not None and response.status == 404


# --- 3. search and filters ---------------------------------------------------------------------------

def test_filters_combine_land_in_the_url_and_a_shared_url_shows_the_same_list(world, page):
    dep, base, runs = world
    _as(page, base, "olga")
    page.locator(f'#runs tr[data-run="{runs["waiting"]}"]').wait_for(timeout=15_000)
    page.fill("#filter-capability", "orders.lookup")
    page.fill("#filter-error", "refused")
    page.fill("#filter-user", OTHER_CUSTOMER)
    page.click("#apply-filters")
    page.wait_for_url("**/?*capability=orders.lookup*")
    page.locator(f'#runs tr[data-run="{runs["fail"]}"]').wait_for(timeout=15_000)
    assert page.locator("#runs tr[data-run]").count() == 1
    query = parse_qs(urlsplit(page.url).query)
    assert query["capability"] == ["orders.lookup"] and query["error"] == ["refused"]
    assert query["user"] == [OTHER_CUSTOMER]
    _fits(page, "story-run-list-filtered-operator")

    shared = page.url
    page.goto(f"{base}/?capability=payments.refund&status=completed")
    page.locator(f'#runs tr[data-run="{runs["refund"]}"]').wait_for(timeout=15_000)
    assert page.locator("#runs tr[data-run]").count() == 1
    page.goto(shared.replace("orders.lookup", "payments.refund"))  # same user, another capability
    page.locator("#no-runs").wait_for(timeout=15_000)
    response = page.goto(f"{base}/?since=yesterday")
    assert response is not None and response.status == 400
    assert "since='yesterday'" in page.locator("#query-error").inner_text()


def test_an_end_users_search_finds_only_their_runs(world, page):
    dep, base, runs = world
    _as(page, base, CUSTOMER)
    page.locator(f'#runs tr[data-run="{runs["refund"]}"]').wait_for(timeout=15_000)
    assert page.locator("#filter-user").count() == 0  # nobody else's runs to look for
    page.goto(f"{base}/?error=refused")  # customer-7's failed run is not theirs
    page.locator("#no-runs").wait_for(timeout=15_000)
    page.goto(f"{base}/?capability=payments.refund")
    page.locator(f'#runs tr[data-run="{runs["waiting"]}"]').wait_for(timeout=15_000)
    assert page.locator(f'#runs tr[data-run="{runs["fail"]}"]').count() == 0
    _fits(page, "story-run-list-filtered-end-user")


# --- 4. who asked, in the inbox ----------------------------------------------------------------------

def test_inbox_rows_say_who_asked_for_whom_and_why(world, page):
    dep, base, runs = world
    _as(page, base, "alice")
    page.goto(f"{base}/approvals")
    row = page.locator(f'#inbox tr[data-run="{runs["waiting"]}"]')
    row.wait_for(timeout=15_000)
    assert row.locator(".asked-by").inner_text() == "asked by [redacted] (agent via agent-harness)"
    assert "for [redacted]" in row.inner_text()
    assert "support agent's approval" in row.locator(".why").inner_text()
    _fits(page, "story-inbox-support-agent")


# --- 5. accessibility: axe-core on every page and role -----------------------------------------------

PAGES = ("/", "/runs/{refund}", "/runs/{refund}?at=4", "/runs/{fail}", "/approvals", "/memory", "/health",
         "/dead-letters", "/?capability=payments&status=completed")


@pytest.mark.parametrize("user", ["alice", "olga", "audrey", CUSTOMER])
def test_no_serious_or_critical_accessibility_violation_on_any_page(world, page, user):
    from axe_playwright_python.sync_playwright import Axe

    dep, base, runs = world
    axe = Axe()
    found: dict[str, list[str]] = {}
    page.goto(f"{base}/login")
    _record(found, "/login", axe.run(page).response)
    _as(page, base, user)
    for path in PAGES:
        url = base + path.format(**runs)
        page.goto(url)
        if "/runs/" in path and "?at=" not in path:
            page.locator("#console, #run-missing").first.wait_for(timeout=15_000)
        _record(found, path, axe.run(page).response)
        slug = "".join(c if c.isalnum() else "-" for c in path.strip("/").replace("{", "").replace("}", ""))
        screenshot(page, f"story-a11y-{user}-{slug or 'runs'}")
    assert not found, "\n".join(f"{p}: {v}" for p, vs in found.items() for v in vs)


def _record(found: dict[str, list[str]], path: str, response: dict[str, Any]) -> None:
    bad = [f"{v['id']} ({v['impact']}): {v['help']} at {[n['target'] for n in v['nodes']][:3]}"
           for v in response["violations"] if v["impact"] in ("serious", "critical")]
    if bad:
        found[path] = bad
