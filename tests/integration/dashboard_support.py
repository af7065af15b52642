"""A dashboard served by uvicorn in a thread, and the system Chromium through Playwright."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import uvicorn
from ops_support import Deployment

from runfacts.dashboard.app import Dashboard, create_app
from runfacts.dashboard.feed import FactsFeed, FeedSettings, StateFeed, ViewFeed, decode_view
from runfacts.dashboard.health import MetricsFeed, consumer_lag, processors
from runfacts.dashboard.letters import DeadLetters
from runfacts.dashboard.session import SessionSigner
from runfacts.ops.client import CommandClient, ReaderSettings
from runfacts.privacy.envelope import KeyView
from runfacts.processors.policy.access import Policy
from runfacts.security.identity import load_users

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextmanager
def serve_dashboard(dep: Deployment, users: Path, outcome_timeout_s: float = 20.0,
                    policy: Policy | None = None, keys: Callable[[], KeyView] | None = None,
                    **options: Any) -> Iterator[str]:
    """The dashboard over `dep`'s topics on a free port (buttons and tenancy by `policy`, personal
    fields revealed with `keys`); yields its base URL."""
    views = ViewFeed(dep.kafka, FeedSettings(dep.names.user_view, decode_view))
    states = StateFeed(dep.kafka, FeedSettings(dep.names.state))
    client = CommandClient(dep.kafka, dep.names, settings=ReaderSettings(outcome_timeout_s=outcome_timeout_s))
    facts = FactsFeed(dep.kafka, FeedSettings(dep.names.events))
    dashboard = Dashboard(views, states, load_users(users), SessionSigner(b"k" * 32), client, keepalive_s=2.0,
                          facts=facts, policy=policy, dead_letters=DeadLetters(dep.kafka, dep.names),
                          lag=lambda: consumer_lag(dep.kafka, processors(dep.names)),
                          audit=FactsFeed(dep.kafka, FeedSettings(dep.names.audit)),
                          metrics=MetricsFeed(dep.kafka, FeedSettings(dep.names.metrics)),
                          **({"keys": keys} if keys is not None else {}), **options)
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(create_app(dashboard), host="127.0.0.1", port=port,
                                           log_level="warning", timeout_graceful_shutdown=1))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not (server.started and views.ready.is_set() and states.ready.is_set() and facts.ready.is_set()):
        if time.monotonic() > deadline or views.error is not None or states.error is not None:
            raise RuntimeError(f"dashboard did not start (feed errors: {views.error}, {states.error})")
        time.sleep(0.05)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(15)


@contextmanager
def chromium() -> Iterator[Any]:
    """Headless Debian Chromium (never a downloaded browser), closed on leaving."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            yield browser
        finally:
            browser.close()


@contextmanager
def browser_page() -> Iterator[Any]:
    """A page in headless Debian Chromium (never a downloaded browser)."""
    with chromium() as browser:
        yield browser.new_page()


@contextmanager
def tab(browser: Any, width: int, timeout_ms: int = 8_000) -> Iterator[Any]:
    """A page of its own context (its own cookies: one signed-in person) `width` px wide."""
    context = browser.new_context(viewport={"width": width, "height": 900})
    try:
        page = context.new_page()
        page.set_default_timeout(timeout_ms)
        yield page
    finally:
        context.close()


def login(page: Any, base: str, user: str, password: str) -> None:
    page.goto(f"{base}/login")
    page.fill("#username", user)
    page.fill("#password", password)
    page.click("#sign-in")
    page.wait_for_url(f"{base}/")


ARTIFACTS = Path(__file__).resolve().parents[2] / "artifacts" / "dashboard"


def screenshot(page: Any, name: str) -> Path:
    """A full-page screenshot of `page` as a test artifact (artifacts/dashboard/<name>.png, gitignored)."""
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    path = ARTIFACTS / f"{name}.png"
    page.screenshot(path=str(path), full_page=True)
    return path
