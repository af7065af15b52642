"""The operator console in real headless Chromium, over the real broker and the real run decider.

The stories are sent as the agent, the support agent and the dispatcher would send them; the
dashboard reads the facts, states and views back from the topics. Each test writes a
screenshot of the page it checks under artifacts/dashboard/ (gitignored).
"""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from confluent_kafka import Producer
from console_support import expiry_story, key_of, password, reauthorizing_policy, refund_story, write_people
from dashboard_support import browser_page, login, screenshot, serve_dashboard
from decider_support import AGENT, SUPPORT, claim, command, completed, create, propose_refund, resume
from engine_support import EngineThread, settings
from ops_support import Deployment

from runfacts.partitioning import partition_for
from runfacts.schemas import commands as cmd
from runfacts.schemas.codec import Codec
from runfacts.workers import projector as projector_app

pytestmark = pytest.mark.integration


@pytest.fixture
def console(kafka_bootstrap: str, tmp_path: Path):
    """A deployment with the refund story (tenant acme), the expiry story (acme) and a run of
    tenant globex, the run decider on the engine, and the dashboard over it."""
    unique = uuid.uuid4().hex[:10]
    dep = Deployment.create(kafka_bootstrap, f"console{unique}")
    engine = EngineThread(dep.decider(), settings(kafka_bootstrap, tmp_path / "state", f"console-{unique}",
                                                  metrics_interval_ms=500)).start()
    projector = EngineThread(projector_app(prefix=dep.names.prefix),
                             settings(kafka_bootstrap, tmp_path / "projector", f"projector-{unique}",
                                      metrics_interval_ms=500)).start()
    runs = {"refund": f"run-refund-{unique}", "expired": f"run-expired-{unique}", "other": f"run-globex-{unique}"}
    now = datetime.now(UTC)
    dep.send(*refund_story(runs["refund"], now, tenant="acme"))
    dep.send(*expiry_story(runs["expired"], now, tenant="acme"))  # the claim is issued 16 min ahead
    dep.send(create(run=runs["other"], at=now, tenant="globex"))
    dep.wait_state(runs["refund"], lambda s: s.status == "completed")
    dep.wait_state(runs["expired"], lambda s: s.statusReason == "approval_expired")
    dep.wait_state(runs["other"], lambda s: s.status == "running")
    users = write_people(tmp_path / "users.toml")
    policy = reauthorizing_policy(tmp_path / "policy.toml")
    with serve_dashboard(dep, users, outcome_timeout_s=20.0, policy=policy) as base:
        yield dep, base, runs
    engine.stop()
    projector.stop()


def test_refund_run_page_shows_lost_response_reconciliation_and_confirmed_verification_on_their_tracks(console):
    dep, base, runs = console
    with browser_page() as page:
        login(page, base, "olga", password("olga"))
        page.goto(f"{base}/runs/{runs['refund']}")
        call = page.locator('.call[data-call="tool-call-031"]')
        call.wait_for(timeout=15_000)
        execution, verification = call.locator(".track-execution"), call.locator(".track-verification")

        assert execution.locator('[data-step="result_unknown"]').count() == 1
        assert execution.locator('[data-step="reconciled"]').inner_text().startswith("reconciled")
        assert "outcome found_completed" in execution.locator('[data-step="reconciled"]').inner_text()
        assert verification.get_attribute("data-current") == "confirmed_success"
        assert verification.locator('[data-step="confirmed_success"]').count() == 1
        assert verification.locator('[data-step="result_unknown"]').count() == 0
        assert "response lost" in page.locator("#timeline").inner_text()
        assert page.locator(".idempotency-key").count() == 1  # operators see the key
        audit = page.locator('#audit[data-verified="yes"]')
        audit.wait_for(timeout=30_000)  # the projector's records, checked against the facts
        page.wait_for_selector("#audit:not(:has-text('not audited yet'))", timeout=30_000)
        facts = page.locator("h2:has-text('Timeline')").inner_text()  # "Timeline (N facts)"
        count = int(facts.split("(")[1].split()[0])
        assert count >= 21  # the refund story's facts (run-end hygiene adds its own at completion)
        assert f"audit chain: {count} records" in page.locator("#audit").inner_text()  # one per fact
        assert "None" not in page.locator("main").inner_text()
        screenshot(page, "run-page-refund-operator")


def test_support_agent_sees_no_other_tenants_run_and_no_operator_only_field(console):
    dep, base, runs = console
    with browser_page() as page:
        login(page, base, "alice", password("alice"))
        page.goto(f"{base}/runs/{runs['other']}")
        page.locator("#run-missing").wait_for(timeout=15_000)
        page.goto(f"{base}/runs/{runs['refund']}")
        page.locator('.call[data-call="tool-call-031"]').wait_for(timeout=15_000)

        text = page.locator("main").inner_text()
        assert page.locator(".idempotency-key").count() == 0 and page.locator("#tenant").count() == 0
        assert "refund:order-001" not in text and "customer-42" not in text
        assert page.locator('.track-verification').get_attribute("data-current") == "confirmed_success"
        screenshot(page, "run-page-refund-support-agent")


def test_expired_approval_offers_reauthorization_to_the_right_role_and_the_page_updates_live(console):
    dep, base, runs = console
    url = f"{base}/runs/{runs['expired']}"
    with browser_page() as page:
        for user in ("olga", "alice"):  # the policy lets neither propose a call
            login(page, base, user, password(user))
            page.goto(url)
            page.locator('#approvals tr[data-approval="approval-tool-call-031"]').wait_for(timeout=15_000)
            assert page.locator("button.reauthorize").count() == 0, user
            assert page.locator(".reauthorize-note").count() == 1, user  # who re-authorizes, said
        login(page, base, "sam", password("sam"))
        page.goto(url)
        button = page.locator('button.reauthorize[data-approval="approval-tool-call-031"]')
        button.wait_for(timeout=15_000)
        screenshot(page, "run-page-expired-supervisor")
        page.evaluate("document.getElementById('live').dataset.marker = 'same-page'")

        button.click()
        page.locator('#command-status[data-outcome="accepted"]').wait_for(timeout=30_000)
        new = page.locator('#approvals tr[data-approval="approval-tool-call-031-r1"][data-status="open"]')
        new.wait_for(timeout=30_000)  # delivered by the topic over SSE, no reload
        assert page.evaluate("document.getElementById('live').dataset.marker") == "same-page"
        state = dep.state(runs["expired"])
        assert state is not None and state.approvals["approval-tool-call-031-r1"].status == "open"
        screenshot(page, "run-page-reauthorized")


def test_event_text_holding_html_is_shown_inert_with_the_csp_kept(console):
    dep, base, runs = console
    evil = f"run-evil-{uuid.uuid4().hex[:8]}"
    payload = '<img src=x onerror="document.title=\'pwned\'"><script>document.title="pwned"</script>'
    created = create(run=evil, at=datetime.now(UTC), tenant="acme")
    created = created.model_copy(update={"payload": created.payload.model_copy(update={"goalSummary": payload})})
    dep.send(created,
             command(cmd.StartTurn, AGENT, run=evil, turnId=f"{evil}-t1", at=datetime.now(UTC)))
    dep.wait_state(evil, lambda s: s.activeTurnId is not None)
    with browser_page() as page:
        response = page.goto(f"{base}/login")
        assert response is not None and "script-src 'self'" in response.headers["content-security-policy"]
        login(page, base, "audrey", password("audrey"))  # auditors see the goal itself
        page.goto(f"{base}/runs/{evil}")
        page.locator("#goal-summary").wait_for(timeout=15_000)

        assert page.locator("#goal-summary").inner_text() == payload  # shown as text
        assert page.locator("#live img").count() == 0 and page.locator("#live script").count() == 0
        assert page.title() != "pwned"
        screenshot(page, "run-page-inert-html-auditor")


def test_run_list_updates_live_without_reload_and_filters_by_search(console):
    dep, base, runs = console
    with browser_page() as page:
        login(page, base, "olga", password("olga"))
        page.locator(f'#runs tr[data-run="{runs["refund"]}"]').wait_for(timeout=15_000)
        assert page.locator(f'#runs tr[data-run="{runs["other"]}"]').count() == 1  # operators: every tenant
        page.evaluate("document.getElementById('live').dataset.marker = 'same-page'")

        fresh = f"run-fresh-{uuid.uuid4().hex[:8]}"
        dep.send(create(run=fresh, at=datetime.now(UTC), tenant="acme"))
        page.locator(f'#runs tr[data-run="{fresh}"]').wait_for(timeout=30_000)
        assert page.evaluate("document.getElementById('live').dataset.marker") == "same-page"
        screenshot(page, "run-list-operator")

        page.fill("#search", runs["refund"])
        page.click("#apply-filters")
        page.wait_for_url(f"**/?*q={runs['refund']}*")
        assert page.locator("#runs tr[data-run]").count() == 1

        login(page, base, "alice", password("alice"))
        page.locator(f'#runs tr[data-run="{runs["refund"]}"]').wait_for(timeout=15_000)
        assert page.locator(f'#runs tr[data-run="{runs["other"]}"]').count() == 0  # tenant globex
        assert page.locator("#filter-tenant").count() == 0
        screenshot(page, "run-list-support-agent")


def test_support_agent_decides_from_the_inbox_and_the_row_goes_when_the_topic_says_so(console):
    dep, base, runs = console
    waiting, now = f"run-waiting-{uuid.uuid4().hex[:8]}", datetime.now(UTC)
    dep.send(create(run=waiting, at=now, tenant="acme"), propose_refund(run=waiting, at=now))
    dep.wait_state(waiting, lambda s: s.status == "waiting_for_approval")
    with browser_page() as page:
        login(page, base, "alice", password("alice"))
        page.goto(f"{base}/approvals")
        row = page.locator(f'#inbox tr[data-run="{waiting}"]')
        row.wait_for(timeout=15_000)
        before = row.locator(".countdown").inner_text()
        ticked = False
        for _ in range(50):  # the script counts down every second (no eval under the CSP: poll here)
            page.wait_for_timeout(100)
            ticked = row.locator(".countdown").inner_text() != before
            if ticked:
                break
        assert ticked, f"countdown stuck at {before}"
        screenshot(page, "approvals-inbox-support-agent")

        row.locator("button.approve").click()
        page.locator('#command-status[data-outcome="accepted"]').wait_for(timeout=30_000)
        row.wait_for(state="detached", timeout=30_000)
        state = dep.state(waiting)
        assert state is not None and state.approvals["approval-tool-call-031"].status == "granted"


def test_redrive_from_the_dead_letters_page_lands(console):
    dep, base, runs = console
    lost = f"run-dead-{uuid.uuid4().hex[:8]}"
    command_ = create(run=lost, at=datetime.now(UTC), tenant="acme")
    key = lost.encode()
    producer = Producer(dep.kafka.client_config())
    producer.produce(dep.names.dlq, Codec().encode(command_), key, headers=[
        ("dlq.topic", dep.names.commands.encode()), ("dlq.partition", str(partition_for(key, 3)).encode()),
        ("dlq.offset", b"0"), ("dlq.schema", b"runfacts.commands.CreateRun"), ("dlq.schemaVersion", b"1"),
        ("dlq.error", b"decider was down (test)"), ("dlq.app", b"run-decider")])
    producer.flush(10)
    with browser_page() as page:
        login(page, base, "alice", password("alice"))
        page.goto(f"{base}/dead-letters")
        assert page.locator("#not-allowed").count() == 1  # operators only
        login(page, base, "olga", password("olga"))
        page.goto(f"{base}/dead-letters")
        letter = page.locator("#letters tr[data-position]", has_text="decider was down (test)")
        letter.wait_for(timeout=15_000)
        screenshot(page, "dead-letters-operator")

        letter.locator("button.redrive").click()
        page.locator("#redrive-status").wait_for(timeout=30_000)
        assert page.locator("#redrive-status").inner_text().startswith("redrove 1 dead letter")
        state = dep.wait_state(lost, lambda s: s.status == "running")  # the command landed and was decided
        assert state.tenant == "acme"
        redriven = page.locator("#letters tr[data-position]", has_text="decider was down (test)")
        assert redriven.locator(".redriven-to").inner_text() == dep.names.commands
        assert redriven.locator("button.redrive").count() == 0  # a second redrive is not offered
        screenshot(page, "dead-letters-redriven")


def test_health_page_shows_lag_per_processor_partition_and_stuck_runs(console):
    dep, base, runs = console
    with browser_page() as page:
        login(page, base, "olga", password("olga"))
        page.goto(f"{base}/health")
        page.locator("#lag").wait_for(timeout=15_000)

        deciders = page.locator('#lag tr[data-processor="run decider"]')
        assert deciders.count() == 3  # one row per partition of the commands topic
        assert sum(int(deciders.nth(i).locator(".lag").inner_text()) for i in range(3)) == 0  # all decided
        dispatchers = page.locator('#lag tr[data-processor="dispatcher"]')
        assert sum(int(dispatchers.nth(i).locator(".lag").inner_text()) for i in range(3)) > 0  # none runs here
        assert page.locator("#stuck-count").inner_text() == "0"
        decider = f"{dep.names.prefix}-run-decider"
        chart = page.locator(f'svg.latency-chart[data-app="{decider}"]')
        for _ in range(40):  # the engines publish every 500 ms; the page shows what has arrived
            if chart.count() == 1:
                break
            page.wait_for_timeout(500)
            page.reload()
        assert chart.count() == 1, page.locator("main").inner_text()
        assert 0 < float(chart.get_attribute("data-p50") or 0) <= float(chart.get_attribute("data-p99") or 0)
        assert chart.locator("polyline.series-p99").count() == 1
        assert page.locator(f'#latency-last tr[data-app="{decider}"]').count() == 1  # its last interval
        assert "None" not in page.locator("main").inner_text()
        screenshot(page, "health-operator")
        login(page, base, "alice", password("alice"))
        page.goto(f"{base}/health")
        assert page.locator("#not-allowed").count() == 1


def test_memory_reviewer_confirms_a_candidate_from_the_memory_page_and_it_goes_when_the_topic_says_so(console):
    dep, base, runs = console
    run, now = f"run-memory-{uuid.uuid4().hex[:8]}", datetime.now(UTC)
    dep.send(create(run=run, at=now, tenant="acme"), propose_refund(run=run, at=now),
             resume(approval="approval-tool-call-031", actor=SUPPORT, at=now, run=run),
             claim("tool-call-031", at=now, key=key_of(run), run=run), completed("tool-call-031", at=now, run=run))
    state = dep.wait_state(run, lambda s: bool(s.evidence))  # the completed call is evidence
    memory = "memory-refund-lesson-1"
    dep.send(command(cmd.ProposeMemory, AGENT, run=run, at=datetime.now(UTC), memoryId=memory,
                     statementRef="lessons/refund-1", statementHash="h" * 64, evidence=(state.evidence[-1],),
                     scopeTenant="acme", scopeKind="capability", scopeId="payments.refund",
                     expiresAt=datetime.now(UTC) + timedelta(days=30)))
    dep.wait_state(run, lambda s: memory in s.memories)
    with browser_page() as page:
        login(page, base, "alice", password("alice"))  # a support agent is no memory reviewer
        page.goto(f"{base}/memory")
        assert page.locator("#not-allowed").count() == 1
        login(page, base, "rita", password("rita"))
        page.goto(f"{base}/memory")
        row = page.locator(f'#memories tr[data-run="{run}"][data-memory="{memory}"]')
        row.wait_for(timeout=15_000)
        assert "capability:payments.refund" in row.inner_text() and "1 fact" in row.inner_text()
        screenshot(page, "memory-candidates-reviewer")
        page.evaluate("document.getElementById('live').dataset.marker = 'same-page'")

        row.locator("button.confirm").click()
        page.locator('#command-status[data-outcome="accepted"]').wait_for(timeout=30_000)
        row.wait_for(state="detached", timeout=30_000)  # gone when the run state says confirmed
        assert page.evaluate("document.getElementById('live').dataset.marker") == "same-page"
        reviewed = dep.state(run)
        assert reviewed is not None and reviewed.memories[memory].status == "confirmed"
        assert reviewed.memories[memory].decidedBy == "rita"


def test_a_long_run_shows_its_newest_facts_unfolds_every_older_one_and_still_updates_live(console):
    dep, base, runs = console
    run, now = f"run-long-{uuid.uuid4().hex[:8]}", datetime.now(UTC)
    turns = [command(cls, AGENT, run=run, turnId=f"{run}-t{n}", at=now)
             for n in range(1, 221) for cls in (cmd.StartTurn, cmd.CompleteTurn)]
    dep.send(create(run=run, at=now, tenant="acme"), *turns)  # 442 facts: three pages
    dep.wait_state(run, lambda s: s.turnCount == 220 and s.activeTurnId is None)
    with browser_page() as page:
        login(page, base, "olga", password("olga"))
        page.goto(f"{base}/runs/{run}")
        page.locator("h2:has-text('Timeline (442 facts)')").wait_for(timeout=30_000)
        rows = page.locator("#timeline tr[data-offset]")
        assert rows.count() == 200 and page.locator("#timeline h3:text-is('Turn 1')").count() == 0
        page.evaluate("document.getElementById('live').dataset.marker = 'same-page'")

        for _ in range(5):  # 242 facts folded: two older pages
            more = page.locator("#earlier-facts a.show-earlier")
            if more.count() == 0:
                break
            shown = rows.count()
            more.click()
            rows.nth(shown).wait_for(timeout=15_000)  # the older page is in (no eval under the CSP)
        offsets = [int(o) for o in page.eval_on_selector_all("#timeline tr[data-offset]",
                                                             "rows => rows.map(r => r.dataset.offset)")]
        assert len(offsets) == 442 and offsets == sorted(set(offsets))  # every fact once, in log order
        assert page.locator("#timeline h3:text-is('Before the first turn')").count() == 1
        screenshot(page, "run-page-long-unfolded")

        dep.send(command(cmd.StartTurn, AGENT, run=run, turnId=f"{run}-t221", at=datetime.now(UTC)))
        page.locator("#timeline h3:text-is('Turn 221')").wait_for(timeout=30_000)  # over SSE, no reload
        assert page.locator("#timeline h3:text-is('Turn 1')").count() == 1  # the unfolded pages stay
        assert rows.count() == 443 and page.locator("h2:has-text('Timeline (443 facts)')").count() == 1
        assert page.evaluate("document.getElementById('live').dataset.marker") == "same-page"
