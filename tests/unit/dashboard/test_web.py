"""The dashboard's HTTP surface without a broker: login, sessions, CSRF, role-trimmed pages.

The feeds are fed the records the run decider publishes: the framed user view (view topic)
and the run state (state topic)."""

from __future__ import annotations

from pathlib import Path

import pytest
from decider_support import Scenario, create, propose_refund
from ops_support import PASSWORDS, write_users
from starlette.testclient import TestClient

from runfacts.dashboard.app import Dashboard, create_app
from runfacts.dashboard.feed import FeedSettings, StateFeed, ViewFeed, decode_view
from runfacts.dashboard.html import run_fragment, sse
from runfacts.dashboard.session import LOGIN_CSRF_COOKIE, SESSION_COOKIE, SessionSigner
from runfacts.ops.client import CommandClient
from runfacts.ops.views import Viewer, page_view, view_of
from runfacts.processors.policy.access import load_policy
from runfacts.projections.user_view import publisher
from runfacts.security.identity import Identity, hash_secret, load_users
from runfacts.settings import KafkaSettings
from runfacts.topics import TopicNames

RUN = "run-20260727001"
SECRET = b"s" * 32


@pytest.fixture
def client(tmp_path: Path):
    kafka = KafkaSettings(bootstrap_servers="127.0.0.1:1")  # never reached by these tests
    names = TopicNames("dash-unit")
    views = ViewFeed(kafka, FeedSettings(names.user_view, decode_view))
    states = StateFeed(kafka, FeedSettings(names.state))
    state = Scenario().given(create(), propose_refund()).s.model_copy(update={"runId": RUN})
    for _topic, key, value in publisher(names.user_view)(state):  # what the decider publishes
        views.apply(key, value)
    states.apply(RUN.encode(), state.model_dump_json().encode())
    dashboard = Dashboard(views, states, load_users(write_users(tmp_path / "users.toml")), SessionSigner(SECRET),
                          CommandClient(kafka, names), policy=load_policy())
    with TestClient(create_app(dashboard, manage_feed=False), base_url="http://dash.test") as c:
        c.dashboard = dashboard  # type: ignore[attr-defined]
        yield c


def _login(client: TestClient, user: str, password: str | None = None):
    form = client.get("/login")
    token = form.cookies[LOGIN_CSRF_COOKIE]
    return client.post("/login", data={"username": user, "password": password or PASSWORDS[user], "csrf": token},
                       follow_redirects=False)


def test_pages_redirect_to_login_when_no_session(client: TestClient):
    response = client.get(f"/runs/{RUN}", follow_redirects=False)

    assert response.status_code == 303 and response.headers["location"] == "/login"


def test_login_sets_strict_httponly_cookie_when_password_is_right(client: TestClient):
    response = _login(client, "alice")

    assert response.status_code == 303
    set_cookie = response.headers["set-cookie"].lower()
    assert f"{SESSION_COOKIE}=" in set_cookie and "httponly" in set_cookie and "samesite=strict" in set_cookie


def test_login_fails_when_password_is_wrong_or_csrf_missing(client: TestClient):
    assert _login(client, "alice", "nope").status_code == 401
    forged = client.post("/login", data={"username": "alice", "password": PASSWORDS["alice"], "csrf": "x"})
    assert forged.status_code == 403


def test_run_page_shows_banner_with_buttons_when_viewer_may_approve(client: TestClient):
    _login(client, "alice")

    page = client.get(f"/runs/{RUN}")

    assert page.status_code == 200
    assert 'id="approval-banner"' in page.text and 'id="approve"' in page.text
    assert "refund on order-001 (high risk)" in page.text  # plain words from codes
    assert "Refund 42.00 EUR for order-001" not in page.text  # the summary is personal: auditors only
    assert "script-src 'self'" in page.headers["content-security-policy"]


def test_run_page_trims_banner_when_viewer_is_operator(client: TestClient):
    _login(client, "olga")

    page = client.get(f"/runs/{RUN}")

    assert 'id="approval-banner"' in page.text
    assert 'id="approve"' not in page.text and "Refund 42.00 EUR" not in page.text
    assert "refund order-001" not in page.text


def test_end_user_sees_no_run_when_it_is_not_theirs(client: TestClient):
    _login(client, "eve")

    assert 'id="run-missing"' in client.get(f"/runs/{RUN}").text
    assert RUN not in client.get("/").text


def test_approve_is_refused_when_csrf_token_is_missing_or_origin_is_foreign(client: TestClient):
    _login(client, "alice")
    url = f"/runs/{RUN}/approvals/approval-tool-call-031"
    csrf = client.get(f"/runs/{RUN}").text.split('name="csrf" value="')[1].split('"')[0]

    missing = client.post(url, data={"decision": "approve"}, headers={"accept": "application/json"})
    foreign = client.post(url, data={"decision": "approve", "csrf": csrf},
                          headers={"accept": "application/json", "origin": "http://evil.test"})

    assert missing.status_code == 403 and foreign.status_code == 403
    assert "CSRF" in missing.json()["message"]


def test_forged_session_cookie_is_ignored_when_signature_is_wrong(client: TestClient):
    _session, value = SessionSigner(b"x" * 32).issue(Identity("mallory", ("supervisor",)), 2_000_000_000)
    client.cookies.set(SESSION_COOKIE, value)

    assert client.get("/", follow_redirects=False).status_code == 303


def test_session_expires_when_ttl_has_passed():
    signer = SessionSigner(SECRET, ttl_s=60)
    session, value = signer.issue(Identity("alice", ("support_agent",)), 1000)

    assert signer.read(value, 1059) == session
    assert signer.read(value, 1060) is None
    assert signer.read(value[:-2] + "xx", 1001) is None


def test_run_fragment_escapes_markup_when_summary_holds_html():
    state = Scenario().given(create(), propose_refund()).s
    approval = state.approvals["approval-tool-call-031"].model_copy(update={"summary": "<script>alert(1)</script>"})
    state = state.model_copy(update={"approvals": {approval.approvalId: approval}})
    auditor = Viewer("audrey", ("auditor",))

    fragment = run_fragment(page_view(view_of(state, auditor.role), auditor), "tok")

    assert "<script>" not in fragment and "&lt;script&gt;" in fragment


def test_sse_prefixes_every_line_when_data_spans_lines():
    assert sse("view", "a\nb") == "event: view\ndata: a\ndata: b\n\n"


def test_run_page_reads_the_published_view_when_viewer_has_the_user_role(client: TestClient):
    _login(client, "alice")
    dashboard: Dashboard = client.dashboard  # type: ignore[attr-defined]
    state = dashboard.states.get(RUN)
    stale = state.model_copy(update={"status": "running", "approvals": {}})
    dashboard.states.apply(RUN.encode(), stale.model_dump_json().encode())  # state moved on, view not yet

    page = client.get(f"/runs/{RUN}")

    assert 'id="approval-banner"' in page.text  # what the view topic says, not a view of the newer state


def test_run_page_shows_operations_detail_without_personal_data_when_viewer_is_operator(client: TestClient):
    _login(client, "olga")

    page = client.get(f"/runs/{RUN}").text

    assert 'id="operator"' in page and "open approvals 1" in page
    for personal in ("customer-42", "refund order-001", "Refund 42.00 EUR"):
        assert personal not in page



def test_tenant_bound_staff_see_and_command_no_run_when_it_belongs_to_another_tenant(tmp_path: Path):
    users = {"alice": ("support_agent", "acme"), "gina": ("support_agent", "globex"), "olga": ("operator", None)}
    lines = []
    for name, (role, tenant) in users.items():
        lines += [f"[users.{name}]", f'roles = ["{role}"]', f'password = "{hash_secret(name + "-pw")}"']
        lines += [f'tenant = "{tenant}"'] if tenant else []
    (tmp_path / "users.toml").write_text("\n".join(lines) + "\n")
    kafka, names = KafkaSettings(bootstrap_servers="127.0.0.1:1"), TopicNames("dash-tenant")
    views = ViewFeed(kafka, FeedSettings(names.user_view, decode_view))
    states = StateFeed(kafka, FeedSettings(names.state))
    state = Scenario().given(create(tenant="acme"), propose_refund()).s.model_copy(update={"runId": RUN})
    for _topic, key, value in publisher(names.user_view)(state):
        views.apply(key, value)
    states.apply(RUN.encode(), state.model_dump_json().encode())
    dashboard = Dashboard(views, states, load_users(tmp_path / "users.toml"), SessionSigner(SECRET),
                          CommandClient(kafka, names), policy=load_policy())
    seen = {}
    for name in users:
        with TestClient(create_app(dashboard, manage_feed=False), base_url="http://dash.test") as c:
            _login(c, name, name + "-pw")
            page = c.get(f"/runs/{RUN}").text
            seen[name] = (RUN in c.get("/").text, 'id="run-missing"' not in page)
            if name == "gina":  # refused before anything is sent (the broker here is unreachable)
                csrf = page.split('name="csrf" value="')[1].split('"')[0]
                approve = c.post(f"/runs/{RUN}/approvals/approval-tool-call-031",
                                 data={"decision": "approve", "csrf": csrf}, headers={"accept": "application/json"})
                assert approve.status_code == 404 and approve.json()["message"] == f"no run {RUN}"

    assert seen == {"gina": (False, False), "alice": (True, True), "olga": (True, True)}  # olga: cross-tenant
