"""The dashboard in real headless Chromium, against the real broker and the real run decider.

Log in, open a run waiting for approval, reload: the same banner. Stop the decider, click
Approve: the command is sent but the banner stays (nothing optimistic). Start the decider
again: the approval is decided, reduced into State, and only then does the banner go.
"""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest
from dashboard_support import browser_page, login, serve_dashboard
from engine_support import EngineThread, settings
from ops_support import PASSWORDS, Deployment, waiting_run, write_users

pytestmark = pytest.mark.integration


def test_banner_disappears_only_after_approval_is_in_the_view_when_approved_in_browser(
        kafka_bootstrap: str, tmp_path: Path) -> None:
    unique = uuid.uuid4().hex[:10]
    dep = Deployment.create(kafka_bootstrap, f"dash{unique}")
    run, approval = f"run-{unique}", f"approval-call-{unique}"
    engine_settings = settings(kafka_bootstrap, tmp_path / "state", f"dash-{unique}")
    engine = EngineThread(dep.decider(), engine_settings).start()
    dep.send(*waiting_run(run, f"call-{unique}"))
    dep.wait_state(run, lambda s: s.status == "waiting_for_approval")
    users = write_users(tmp_path / "users.toml")

    with serve_dashboard(dep, users, outcome_timeout_s=3.0) as base, browser_page() as page:
        login(page, base, "alice", PASSWORDS["alice"])
        page.goto(f"{base}/runs/{run}")
        banner = page.locator("#approval-banner")
        banner.wait_for(state="visible", timeout=15_000)
        assert banner.get_attribute("data-approval") == approval
        page.reload()
        page.locator("#approval-banner").wait_for(state="visible", timeout=15_000)
        assert page.locator("#approval-banner").get_attribute("data-approval") == approval

        engine.stop()  # the decider is down: the command waits in the commands topic
        page.click("#approve")
        page.locator('#command-status[data-outcome="unanswered"]').wait_for(timeout=15_000)
        assert page.locator("#approval-banner").is_visible(), "banner must stay until the view changes"
        assert dep.state(run).approvals[approval].status == "open"

        engine = EngineThread(dep.decider(), engine_settings).start()
        page.locator("#approval-banner").wait_for(state="detached", timeout=30_000)
        state = dep.state(run)
        assert state is not None and state.approvals[approval].status == "granted"
        assert state.approvals[approval].decidedBy == "alice"
        assert page.locator("#run-status").inner_text() == "running"
    engine.stop()
