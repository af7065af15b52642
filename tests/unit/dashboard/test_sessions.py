"""Dashboard sessions that can be ended server-side, and login throttling (issue 20).

No broker: the feeds are fed the records the run decider publishes. The SSE test serves the
app with uvicorn on a free port and reads the stream over real HTTP."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest
import uvicorn
from decider_support import Scenario, create, propose_refund
from ops_support import PASSWORDS, write_users
from starlette.testclient import TestClient

from runfacts.cli.dashboard import DashboardSettings, build_dashboard
from runfacts.dashboard.app import Dashboard, create_app
from runfacts.dashboard.feed import FeedSettings, StateFeed, ViewFeed, decode_view
from runfacts.dashboard.guard import LoginThrottle, ThrottleSettings, UsersFile, cookie_secure_for
from runfacts.dashboard.session import LOGIN_CSRF_COOKIE, SessionSigner
from runfacts.ops.client import CommandClient
from runfacts.projections.user_view import publisher
from runfacts.settings import KafkaSettings
from runfacts.topics import TopicNames

RUN = "run-20260727001"


def _dashboard(users: Path, throttle: ThrottleSettings | None = None) -> Dashboard:
    kafka, names = KafkaSettings(bootstrap_servers="127.0.0.1:1"), TopicNames("dash-sessions")
    views = ViewFeed(kafka, FeedSettings(names.user_view, decode_view))
    states = StateFeed(kafka, FeedSettings(names.state))
    state = Scenario().given(create(), propose_refund()).s.model_copy(update={"runId": RUN})
    for _topic, key, value in publisher(names.user_view)(state):
        views.apply(key, value)
    states.apply(RUN.encode(), state.model_dump_json().encode())
    return Dashboard(views, states, UsersFile(users), SessionSigner(b"s" * 32), CommandClient(kafka, names),
                     throttle=LoginThrottle(throttle), keepalive_s=5.0, session_check_s=0.2)


@pytest.fixture
def users(tmp_path: Path) -> Path:
    return write_users(tmp_path / "users.toml")


def _client(d: Dashboard) -> TestClient:
    return TestClient(create_app(d, manage_feed=False), base_url="http://dash.test")


def _login(client: TestClient, user: str, password: str | None = None) -> httpx.Response:
    token = client.get("/login").cookies[LOGIN_CSRF_COOKIE]
    return client.post("/login", data={"username": user, "password": password or PASSWORDS[user], "csrf": token},
                       follow_redirects=False)


def _csrf(page: str) -> str:
    return page.split('name="csrf" value="')[1].split('"')[0]


def test_login_is_throttled_with_429_and_retry_after_when_n_wrong_passwords_fell_within_window(users: Path):
    with _client(_dashboard(users, ThrottleSettings(max_per_user=3, window_s=600))) as c:
        wrong = [_login(c, "alice", "nope").status_code for _ in range(3)]
        throttled = _login(c, "alice")  # the N+1th: refused even with the right password

    assert wrong == [401, 401, 401]
    assert throttled.status_code == 429
    assert 0 < int(throttled.headers["retry-after"]) <= 600
    assert "Too many failed sign-ins" in throttled.text and "try again in" in throttled.text


def test_login_is_throttled_per_client_address_when_failures_spread_over_user_names(users: Path):
    with _client(_dashboard(users, ThrottleSettings(max_per_user=10, max_per_address=4))) as c:
        statuses = [_login(c, name, "nope").status_code for name in ("alice", "olga", "eve", "bob")]
        throttled = _login(c, "olga")

    assert statuses == [401] * 4 and throttled.status_code == 429


def test_throttle_lets_a_user_in_again_when_the_window_has_passed():
    throttle = LoginThrottle(ThrottleSettings(max_per_user=2, max_per_address=100, window_s=60))
    throttle.failed("alice", "10.0.0.1", 1000)
    throttle.failed("alice", "10.0.0.1", 1030)

    assert throttle.retry_after("alice", "10.0.0.2", 1031) == 29  # per user, whatever the address
    assert throttle.retry_after("bob", "10.0.0.1", 1031) is None
    assert throttle.retry_after("alice", "10.0.0.1", 1059) == 1
    assert throttle.retry_after("alice", "10.0.0.1", 1060) is None  # the first failure has left the window


def test_revoked_session_gets_401_on_next_request_when_user_signed_out_everywhere(users: Path):
    d = _dashboard(users)
    with _client(d) as laptop, _client(d) as phone:
        assert _login(laptop, "alice").status_code == 303 and _login(phone, "alice").status_code == 303
        assert phone.get(f"/runs/{RUN}").status_code == 200
        page = laptop.get(f"/runs/{RUN}").text

        assert laptop.post("/logout", data={"csrf": _csrf(page), "everywhere": "1"},
                           follow_redirects=False).status_code == 303

        again = phone.get(f"/runs/{RUN}", follow_redirects=False)
        assert again.status_code == 401 and "Your session has ended" in again.text
        assert phone.get("/stream").status_code == 401


def test_old_cookie_gets_401_when_its_session_signed_out(users: Path):
    with _client(_dashboard(users)) as c:
        _login(c, "olga")
        cookie = dict(c.cookies)
        page = c.get(f"/runs/{RUN}").text
        c.post("/logout", data={"csrf": _csrf(page)})
        for name, value in cookie.items():  # an attacker replays the copied cookie
            c.cookies.set(name, value)

        replay = c.post(f"/runs/{RUN}/stop", data={"csrf": _csrf(page)}, headers={"accept": "application/json"})

    assert replay.status_code == 401


def test_session_ends_at_once_when_the_users_file_changes_the_users_role(users: Path):
    with _client(_dashboard(users)) as c:
        _login(c, "alice")
        assert c.get(f"/runs/{RUN}").status_code == 200
        text = users.read_text()
        users.write_text(text.replace('roles = ["support_agent"]', 'roles = ["user"]', 1))

        assert c.get(f"/runs/{RUN}", follow_redirects=False).status_code == 401
        assert _login(c, "alice").status_code == 303  # signing in again gets the new role
        assert 'id="approve"' not in c.get(f"/runs/{RUN}").text


@contextmanager
def _serve(d: Dashboard) -> Iterator[str]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(create_app(d, manage_feed=False), host="127.0.0.1", port=port,
                                           log_level="warning", timeout_graceful_shutdown=1))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    while not server.started:
        time.sleep(0.02)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(10)


def test_sse_stream_closes_when_its_session_is_revoked(users: Path):
    d = _dashboard(users)
    with _serve(d) as base, httpx.Client(base_url=base, timeout=10) as c:
        token = c.get("/login").cookies[LOGIN_CSRF_COOKIE]
        c.post("/login", data={"username": "alice", "password": PASSWORDS["alice"], "csrf": token})
        lines: list[str] = []
        with c.stream("GET", f"/runs/{RUN}/stream") as stream:
            revoked_at = None
            for line in stream.iter_lines():
                lines.append(line)
                if revoked_at is not None and time.monotonic() - revoked_at > 5:
                    break  # a keep-alive after 5 s: the stream outlived its session
                if line == "event: view":
                    revoked_at = time.monotonic()
                    assert d.sessions.revoke_user("alice") == 1
        assert revoked_at is not None
        ended_after = time.monotonic() - revoked_at

    assert lines[0] == "event: view" and "event: ended" in lines
    assert lines[lines.index("event: ended") + 1] == "data: your session has ended: sign in again"
    assert ended_after < 3.0


def test_cookie_secure_is_on_by_default_unless_bound_to_loopback(tmp_path: Path, monkeypatch):
    assert cookie_secure_for(None, "0.0.0.0") and cookie_secure_for(None, "dash.example.com")
    assert not cookie_secure_for(None, "127.0.0.1") and not cookie_secure_for(None, "::1")
    assert not cookie_secure_for(False, "0.0.0.0") and cookie_secure_for(True, "127.0.0.1")
    monkeypatch.setenv("RUNFACTS_USERS_FILE", str(write_users(tmp_path / "users.toml")))
    kafka = KafkaSettings(bootstrap_servers="127.0.0.1:1")
    assert build_dashboard(DashboardSettings(), kafka, "0.0.0.0").cookie_secure
    assert not build_dashboard(DashboardSettings(), kafka).cookie_secure  # settings.host: 127.0.0.1
    assert not build_dashboard(DashboardSettings(cookie_secure=False), kafka, "0.0.0.0").cookie_secure


def test_parallel_sign_ins_cannot_all_pass_the_throttle_check():
    throttle = LoginThrottle(ThrottleSettings(max_per_user=3, max_per_address=100, window_s=60))

    waits = [throttle.attempt("alice", "10.0.0.1", 1000) for _ in range(5)]  # none finished yet

    assert waits[:3] == [None, None, None] and all(w is not None for w in waits[3:])


def test_right_password_clears_the_users_failures_but_not_the_addresss():
    throttle = LoginThrottle(ThrottleSettings(max_per_user=2, max_per_address=3, window_s=60))
    throttle.attempt("alice", "10.0.0.1", 1000)  # wrong
    throttle.attempt("bob", "10.0.0.1", 1001)  # wrong
    assert throttle.attempt("alice", "10.0.0.1", 1002) is None
    throttle.succeeded("alice", "10.0.0.1", 1002)

    assert throttle.retry_after("alice", "10.0.0.9", 1003) is None
    assert throttle.attempt("carol", "10.0.0.1", 1003) is None  # the address holds 2 failures, then 3
    assert throttle.retry_after("dave", "10.0.0.1", 1004) is not None
