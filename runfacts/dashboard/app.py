"""The live dashboard (Starlette + server-sent events): renders Views, submits commands, writes no State.

Routes:
- GET/POST /login, POST /logout: users file + scrypt; a signed HttpOnly SameSite=Strict
  session cookie; login itself is CSRF-protected with a double-submit cookie and throttled
  per user and per client address (429 + Retry-After). Sessions live server-side
  (`guard.Sessions`): sign-out (`everywhere=1`: all the user's sessions) and a change of the
  user's roles or tenant in the users file end them; a request with an ended session gets
  401, its SSE stream an `ended` event and its end.
- GET / and GET /runs/{run}: the runs and one run, as the viewer's role may see them; the
  `#live` part is kept current by GET /stream and GET /runs/{run}/stream (SSE). A run page
  shows its newest facts and tool calls; GET /runs/{run}/facts?before=<offset> and
  /runs/{run}/calls?before=<call> answer the older pages (a fragment for the page's script,
  `X-Fragment: 1`, else a page of their own), and the stream, asked with
  `facts_from=<offset>&calls_from=<call>`, keeps everything from there on current.
- POST /runs/{run}/approvals/{approval}, /runs/{run}/stop, /cancel, /retry/{call}, /resolve-compensation: CSRF token
  required; a command is built from the run's State (argsHash) at the version of the view the
  page shows (expectedVersion), signed approval token when keys are configured, actor = the
  session's user with authSource "dashboard"; the answer is the decider's outcome (JSON for
  the page's script).
What a page shows is the projections' user view: for the user role exactly the record the
run decider published to the user-view topic (the `views` feed), for operators and auditors
`user_view(state, role)` over the run-state topic (the `states` feed, which also says whose
run it is). Nothing here changes a view: the banner goes away only when the feed delivers a
view without it.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from html import escape
from typing import Any
from urllib.parse import urlsplit

from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, RedirectResponse, Response, StreamingResponse
from starlette.routing import Route

from runfacts import telemetry
from runfacts.dashboard import console, html
from runfacts.dashboard.auditcheck import AuditStatus, chain_status
from runfacts.dashboard.console import run_console
from runfacts.dashboard.feed import FactsFeed, StateFeed, ViewFeed
from runfacts.dashboard.guard import LoginThrottle, Sessions, UsersFile, directory_of
from runfacts.dashboard.health import Lag, MetricsFeed
from runfacts.dashboard.letters import DeadLetters, preview, run_of
from runfacts.dashboard.retell.asof import as_of
from runfacts.dashboard.runlist import REVIEWER, ListQuery, fleet_health, inbox, memory_inbox, run_list
from runfacts.dashboard.runpage import NONE_TEXT, earlier_calls, earlier_facts, proposers, run_page, timeline
from runfacts.dashboard.session import (
    CSRF_FIELD,
    CSRF_HEADER,
    LOGIN_CSRF_COOKIE,
    SESSION_COOKIE,
    Session,
    SessionSigner,
    csrf_ok,
    new_token,
)
from runfacts.ops import control
from runfacts.ops.client import CommandClient
from runfacts.ops.control import ControlError, Issue
from runfacts.ops.views import ORPHAN_AFTER, STAFF_ROLES, Viewer, page_view, revealed_view, view_of
from runfacts.privacy.envelope import NO_KEYS, KeyView, reveal
from runfacts.processors.decider.state import RunState
from runfacts.processors.policy.access import Policy, allowed_command_types, tenant_bound
from runfacts.projections.audit import reducer as audit_reducer
from runfacts.schemas.common import ApprovalDecision, CommandBase
from runfacts.schemas.errors import ConfigError, InfrastructureError, InvalidInput
from runfacts.security.approvals import ApprovalRequest, sign_approval
from runfacts.security.identity import AuthenticationFailed, UserDirectory

AUTH_SOURCE = "dashboard"
SECURITY_HEADERS = [
    (b"content-security-policy", b"default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; "
                                 b"frame-ancestors 'none'; form-action 'self'"),
    (b"x-content-type-options", b"nosniff"), (b"referrer-policy", b"same-origin"), (b"x-frame-options", b"DENY"),
]
Build = Callable[[RunState, Session, Any], CommandBase]


@dataclass
class Dashboard:
    """What the app needs: the user-view and run-state feeds, the users, the session signer, the
    command client."""

    views: ViewFeed  # the user-view topic (decode_view): what the user role sees
    states: StateFeed  # the run-state topic (decode_state): operator/auditor views, owners, rows, commands
    users: UserDirectory | UsersFile  # a UsersFile: role/tenant changes on disk take effect at once
    signer: SessionSigner
    commands: CommandClient
    cookie_secure: bool = False
    keepalive_s: float = 15.0
    policy: Policy | None = None  # buttons follow the policy's command rules when given
    sessions: Sessions = field(default_factory=Sessions)
    throttle: LoginThrottle = field(default_factory=LoginThrottle)
    session_check_s: float = 1.0  # how often an SSE stream checks that its session is still live
    facts: FactsFeed | None = None  # the events topic: the run page's timeline and tracks
    dead_letters: DeadLetters | None = None  # the dead-letter topic (operators: list and redrive)
    lag: Callable[[], list[Lag]] | None = None  # consumer lag per processor and partition (health page)
    audit: FactsFeed | None = None  # the audit topic's records (raw), for the run page's chain check
    metrics: MetricsFeed | None = None  # the engines' metrics records (health page: commit latency)
    keys: Callable[[], KeyView] = lambda: NO_KEYS  # the data keys personal fields are revealed with
    orphan_after: timedelta = ORPHAN_AFTER  # a call waiting this long for a dispatcher's claim is an orphan


def _now_s() -> int:
    return int(time.time())


def _viewer(session: Session, policy: Policy | None = None) -> Viewer:
    identity = session.identity
    if policy is None:  # no policy, no tenancy (as in the decider)
        return Viewer(identity.subject, identity.roles)
    actor = identity.actor(AUTH_SOURCE)
    return Viewer(identity.subject, identity.roles, allowed_command_types(policy, actor),
                  identity.tenant, tenant_bound(policy, actor))


class _Pages:
    """The route handlers over one Dashboard."""

    def __init__(self, d: Dashboard) -> None:
        self.d = d

    def session_of(self, request: Request) -> Session | None:
        """The request's session while it is live (signed, unexpired, not revoked, user unchanged)."""
        session = self.d.signer.read(request.cookies.get(SESSION_COOKIE), _now_s())
        return session if session is not None and self.alive(session) else None

    def alive(self, session: Session) -> bool:
        return self.d.sessions.alive(session, directory_of(self.d.users), _now_s())

    def ended(self, request: Request) -> Response:
        """No live session: 401 for a signed cookie whose session ended, else off to /login."""
        if self.d.signer.read(request.cookies.get(SESSION_COOKIE), _now_s()) is None:
            return RedirectResponse("/login", 303)
        return self.login_page(request, "Your session has ended (signed out, or your roles changed): "
                                        "sign in again.", 401)

    def cookie(self, response: Response, name: str, value: str, max_age: int | None = None) -> None:
        response.set_cookie(name, value, max_age=max_age, httponly=True, samesite="strict",
                            secure=self.d.cookie_secure, path="/")

    async def login_form(self, request: Request) -> Response:
        return self.login_page(request)

    def login_page(self, request: Request, error: str | None = None, status: int = 200,
                   headers: dict[str, str] | None = None) -> Response:
        token = new_token()
        response = HTMLResponse(html.login_page(token, error), status, headers)
        self.cookie(response, LOGIN_CSRF_COOKIE, token, 600)
        if status == 401:
            response.delete_cookie(SESSION_COOKIE, path="/")
        return response

    async def login(self, request: Request) -> Response:
        form = await request.form()
        if not csrf_ok(request.cookies.get(LOGIN_CSRF_COOKIE), str(form.get(CSRF_FIELD, ""))):
            return HTMLResponse("login form expired or forged (CSRF check failed): reload /login", 403)
        user, address = str(form.get("username", "")), request.client.host if request.client else "-"
        started = _now_s()
        wait = self.d.throttle.attempt(user, address, started)
        if wait is not None:  # refused before the password is even checked
            return self.login_page(request, f"Too many failed sign-ins for this user or from this address: "
                                            f"try again in {wait} s.", 429, {"Retry-After": str(wait)})
        try:
            identity = await run_in_threadpool(directory_of(self.d.users).authenticate, user,
                                               str(form.get("password", "")))
        except AuthenticationFailed:  # the attempt stays counted
            return self.login_page(request, "Wrong user or password.", 401)
        self.d.throttle.succeeded(user, address, started)
        self.d.sessions.prune(_now_s())
        session, value = self.d.signer.issue(identity, _now_s())
        self.d.sessions.add(session)
        response = RedirectResponse("/", 303)
        self.cookie(response, SESSION_COOKIE, value, self.d.signer.ttl_s)
        response.delete_cookie(LOGIN_CSRF_COOKIE, path="/")
        return response

    async def logout(self, request: Request) -> Response:
        session = self.session_of(request)
        if session is not None:
            form = await request.form()
            if not _csrf_passed(request, session, form):
                return JSONResponse({"message": "CSRF check failed"}, 403)
            if form.get("everywhere"):
                self.d.sessions.revoke_user(session.identity.subject)
            else:
                self.d.sessions.revoke(session.sid)
        response = RedirectResponse("/login", 303)
        response.delete_cookie(SESSION_COOKIE, path="/")
        return response

    def runs_html(self, session: Session, query: ListQuery) -> str:
        runs = run_list(self.d.states.all_rows(), _viewer(session, self.d.policy), query, datetime.now(UTC),
                        owner=self.owners())
        return console.runs_table(runs, datetime.now(UTC))

    def run_html(self, session: Session, run_id: str, facts_from: int | None = None,
                 calls_from: str | None = None) -> str:
        viewer = _viewer(session, self.d.policy)
        view = shown(self.d, viewer, run_id)
        state = self.d.states.get(run_id)
        if view is None or not isinstance(state, RunState):
            return html.run_fragment(view, session.csrf)
        entries = self.d.facts.entries(run_id) if self.d.facts is not None else []
        page = run_page(state, entries, viewer, self.audit_status(run_id), facts_from, calls_from, self.d.keys(),
                        lookup=lambda other: self.seen_state(viewer, other))
        banner = view.get("approvalBanner")
        asking = next((a for a in page.approvals if banner and a.approval_id == banner["approvalId"]), None)
        return html.run_fragment(view, session.csrf, run_console(page, session.csrf), asking,
                                 console.story_header(page))

    def seen_state(self, viewer: Viewer, run_id: str) -> RunState | None:
        """Another run's state when this viewer may see that run (a child under a parent's page)."""
        state = self.d.states.get(run_id)
        return state if isinstance(state, RunState) and shown(self.d, viewer, run_id) is not None else None

    def owners(self) -> Callable[[str | None], str | None]:
        """A run's userId as a viewer's subject compares with it (a pseudonym revealed), with the
        keys read once for a whole page (a key view unwraps every data key: not once a row)."""
        keys = self.d.keys()
        return lambda user_id: None if user_id is None else str(reveal(user_id, "userId", keys))

    def earlier_html(self, session: Session, run_id: str, part: str, before: str) -> str | None:
        """The page of facts (or tool calls) just before `before`; None: not this viewer's run."""
        viewer = _viewer(session, self.d.policy)
        state = self.d.states.get(run_id)
        if shown(self.d, viewer, run_id) is None or not isinstance(state, RunState):
            return None
        entries = self.d.facts.entries(run_id) if self.d.facts is not None else []
        if part == "facts":
            return console.facts_fragment(run_id, earlier_facts(entries, viewer, int(before), self.d.keys()))
        return console.calls_fragment(run_id, earlier_calls(state, entries, viewer, before, self.d.keys()))

    async def earlier(self, request: Request) -> Response:
        """GET /runs/{run}/facts|calls?before=…: an older page of the run's facts or tool calls."""
        session = self.session_of(request)
        if session is None:
            return self.ended(request)
        run_id, part = request.path_params["run_id"], request.url.path.rsplit("/", 1)[1]
        before = request.query_params.get("before", "")
        if not before or (part == "facts" and not before.isdigit()):
            wanted = "offset of the first fact" if part == "facts" else "id of the first tool call"
            return HTMLResponse(f'<p role="alert">before="{escape(before)}": give the {wanted} the page shows '
                                '(the "Show earlier" link carries it)</p>', 400)
        fragment = await run_in_threadpool(self.earlier_html, session, run_id, part, before)
        if fragment is None:
            return HTMLResponse('<p id="run-missing" class="muted">No such run (or not yours to see).</p>', 404)
        if request.headers.get("x-fragment"):
            return HTMLResponse(fragment, headers={"Vary": "X-Fragment"})
        noun = "facts" if part == "facts" else "tool calls"
        body = (f'<h1>Run <a href="/runs/{escape(run_id)}">{escape(run_id)}</a>: earlier {noun}</h1>'
                f'<div id="earlier">{fragment}</div>')
        return HTMLResponse(html.page(f"Run {run_id}: earlier {noun}", body, session.identity.subject, session.csrf),
                            headers={"Vary": "X-Fragment"})

    def audit_status(self, run_id: str) -> AuditStatus | None:
        if self.d.audit is None or self.d.facts is None:
            return None
        try:
            records = [audit_reducer.from_dict(audit_reducer.schema().decode(value))
                       for _o, _t, value in self.d.audit.records_of(run_id)]
        except (InvalidInput, KeyError, TypeError, ValueError) as exc:
            return AuditStatus(0, 0, "", False, f"an audit record does not decode: {exc}", 0)
        events = {offset: value for offset, _t, value in self.d.facts.records_of(run_id)}
        return chain_status(records, events, self.d.facts.settings.topic)

    async def index(self, request: Request) -> Response:
        session = self.session_of(request)
        if session is None:
            return self.ended(request)
        try:
            query = ListQuery.parse(request.query_params)
        except ValueError as exc:
            return HTMLResponse(html.page("Runs", f'<p role="alert" id="query-error">{escape(str(exc))}</p>',
                                          session.identity.subject, session.csrf), 400)
        staff = _viewer(session, self.d.policy).role in ("operator", "auditor")
        people = bool(STAFF_ROLES & set(session.identity.roles))
        body = ("<h1>Runs</h1>" + console.runs_filters(query, staff, people)
                + html.live(f"/stream?{query.query_string()}", self.runs_html(session, query)))
        return HTMLResponse(html.page("Runs", body, session.identity.subject, session.csrf))

    def inbox_html(self, session: Session) -> str:
        viewer, keys = _viewer(session, self.d.policy), self.d.keys()
        asked: dict[str, dict[str, str]] = {}  # per run: who asked each approval (read once a run)

        def proposer(run_id: str, approval_id: str) -> str:
            if run_id not in asked:
                entries = self.d.facts.entries(run_id) if self.d.facts is not None else []
                asked[run_id] = proposers(entries, viewer, keys)
            return asked[run_id].get(approval_id, NONE_TEXT)
        rows = inbox(self.d.states.all_rows(), viewer, self.owners(), proposer)
        return console.inbox_table(rows, datetime.now(UTC), session.csrf)

    async def approvals(self, request: Request) -> Response:
        session = self.session_of(request)
        if session is None:
            return self.ended(request)
        body = ("<h1>Approvals waiting for you</h1>" + html.live("/approvals/stream", self.inbox_html(session))
                + '<p id="command-status" role="status"></p>')
        return HTMLResponse(html.page("Approvals", body, session.identity.subject, session.csrf))

    def memory_html(self, session: Session) -> str:
        viewer = _viewer(session, self.d.policy)
        rows = memory_inbox(self.d.states.all_rows(), viewer, datetime.now(UTC))
        may_decide = self.d.policy is None or "memory.review" in (viewer.allowed or ())
        return console.memory_table(rows, datetime.now(UTC), session.csrf, may_decide)

    async def memory(self, request: Request) -> Response:
        """Pending memory candidates, for memory reviewers: Confirm/Reject submit ReviewMemory."""
        session = self.session_of(request)
        if session is None:
            return self.ended(request)
        if REVIEWER not in session.identity.roles:
            return HTMLResponse(html.page("Memory", '<p id="not-allowed">Memory candidates are for memory '
                                          'reviewers.</p>', session.identity.subject, session.csrf), 403)
        body = ("<h1>Memory candidates waiting for review</h1>"
                + html.live("/memory/stream", self.memory_html(session))
                + '<p id="command-status" role="status"></p>')
        return HTMLResponse(html.page("Memory", body, session.identity.subject, session.csrf))

    async def letters(self, request: Request, note: str = "", status: int = 200) -> Response:
        session = self.session_of(request)
        if session is None:
            return self.ended(request)
        if "operator" not in session.identity.roles or self.d.dead_letters is None:
            return HTMLResponse(html.page("Dead letters", '<p id="not-allowed">Dead letters are for operators.</p>',
                                          session.identity.subject, session.csrf), 403)
        try:
            letters = await run_in_threadpool(self.d.dead_letters.read)
        except InfrastructureError as exc:
            return HTMLResponse(html.page("Dead letters", f'<p role="alert">{escape(str(exc))}</p>',
                                          session.identity.subject, session.csrf), 503)
        message = f'<p id="redrive-status" role="status">{escape(note)}</p>' if note else ""
        body = (f"<h1>Dead letters ({len(letters)})</h1>{message}"
                + console.letters_table(letters, session.csrf, True,
                                        {x.position: (run_of(x), *preview(x)) for x in letters}))
        return HTMLResponse(html.page("Dead letters", body, session.identity.subject, session.csrf), status)

    async def redrive(self, request: Request) -> Response:
        """Redrive one letter (operators, CSRF), then show the list as the topic now has it."""
        session = self.session_of(request)
        if session is None:
            return JSONResponse({"message": "sign in first"}, 401)
        form = await request.form()
        if not _csrf_passed(request, session, form):
            return JSONResponse({"message": "CSRF check failed: reload the page"}, 403)
        if "operator" not in session.identity.roles or self.d.dead_letters is None:
            return JSONResponse({"message": "dead letters are for operators"}, 403)
        position = str(form.get("position", ""))
        try:
            done = await run_in_threadpool(self.d.dead_letters.redrive, position)
        except ConfigError as exc:
            return await self.letters(request, f"not redriven: {exc}", 409)
        except InfrastructureError as exc:
            return await self.letters(request, f"not redriven: {exc}", 503)
        return await self.letters(request, f"redrove {done} dead letter ({position}); marker recorded")

    async def health(self, request: Request) -> Response:
        session = self.session_of(request)
        if session is None:
            return self.ended(request)
        viewer = _viewer(session, self.d.policy)
        if viewer.role not in ("operator", "auditor"):
            return HTMLResponse(html.page("Health", '<p id="not-allowed">Health is for operators.</p>',
                                          session.identity.subject, session.csrf), 403)
        lags, error = [], ""
        if self.d.lag is None:
            error = "consumer lag is not configured for this dashboard"
        else:
            try:
                lags = await run_in_threadpool(self.d.lag)
            except InfrastructureError as exc:
                error = str(exc)
        now = datetime.now(UTC)
        limit = self.d.states.settings.stuck_after
        stuck = sorted(((s.runId, s.status, s.stuck_for(now) or timedelta(0)) for s in self.d.states.all_rows()
                        if viewer.may_see(s.userId, s.tenant) and (s.stuck_for(now) or timedelta(0)) > limit),
                       key=lambda r: r[2], reverse=True)
        feeds = [(name, "failed: " + str(f.error) if f.error is not None else ("ready" if f.ready.is_set()
                                                                               else "catching up"))
                 for name, f in (("user views", self.d.views), ("run states", self.d.states), ("facts", self.d.facts),
                                 ("audit", self.d.audit), ("engine metrics", self.d.metrics))
                 if f is not None]
        metrics = self.d.metrics.by_app() if self.d.metrics is not None else None
        since, denials = self.d.facts.health_counts() if self.d.facts is not None else (None, None)
        fleet = fleet_health(self.d.states.all_rows(), viewer, now, limit, since, denials,
                             owner=self.owners(), after=self.d.orphan_after)
        halted = self.d.metrics.halted() if self.d.metrics is not None else None
        body = "<h1>Health</h1>" + console.health_page(lags, error, stuck[:20], len(stuck), feeds, metrics, fleet,
                                                       halted, int(now.timestamp() * 1000))
        return HTMLResponse(html.page("Health", body, session.identity.subject, session.csrf))

    async def run_page(self, request: Request) -> Response:
        session = self.session_of(request)
        if session is None:
            return self.ended(request)
        run_id = request.path_params["run_id"]  # the State and facts may be read back from the topics
        at = request.query_params.get("at")
        if at is not None:
            return await self.as_of_page(session, run_id, at)
        body = (html.live(f"/runs/{run_id}/stream", await run_in_threadpool(self.run_html, session, run_id))
                + '<p id="command-status" role="status"></p>')
        return HTMLResponse(html.page(f"Run {run_id}", body, session.identity.subject, session.csrf))

    def as_of_html(self, session: Session, run_id: str, at: str) -> tuple[int, str]:
        """The run as of fact `at` (status, page body); 404 when this viewer may not see it."""
        viewer = _viewer(session, self.d.policy)
        if shown(self.d, viewer, run_id) is None:
            return 404, '<p id="run-missing" class="muted">No such run (or not yours to see).</p>'
        entries = self.d.facts.entries(run_id) if self.d.facts is not None else []
        if not at.isdigit() or not 1 <= int(at) <= len(entries):
            return 400, (f'<p role="alert" id="as-of-error">at={escape(at)}: give the number of one of the run\'s '
                         f'{len(entries)} facts (1 to {len(entries)}; the timeline\'s #N links carry it)</p>')
        number, keys = int(at), self.d.keys()
        fact = next((f for turn in timeline(entries, viewer, number - 1, number, None, keys) for f in turn.facts), None)
        return 200, console.as_of_section(as_of(run_id, entries, number, viewer, keys, fact))

    async def as_of_page(self, session: Session, run_id: str, at: str) -> Response:
        """GET /runs/{run}?at=N: the run as of its fact N (not live: the past does not change)."""
        status, body = await run_in_threadpool(self.as_of_html, session, run_id, at)
        return HTMLResponse(html.page(f"Run {run_id} as of fact {at}", body, session.identity.subject, session.csrf),
                            status)

    async def stream(self, request: Request) -> Response:
        session = self.session_of(request)
        if session is None:
            return Response("sign in first (no live session)", 401)
        run_id = request.path_params.get("run_id")
        alive = lambda: self.alive(session)  # noqa: E731
        if request.url.path == "/approvals/stream":
            stream = _Stream((self.d.states,), self.d.keepalive_s, self.d.session_check_s, alive, 0.5)
            return stream.response(None, lambda: self.inbox_html(session))
        if request.url.path == "/memory/stream":
            if REVIEWER not in session.identity.roles:
                return Response("memory candidates are for memory reviewers", 403)
            stream = _Stream((self.d.states,), self.d.keepalive_s, self.d.session_check_s, alive, 0.5)
            return stream.response(None, lambda: self.memory_html(session))
        if run_id is None:  # the list is built from State; at most two renders a second
            try:
                query = ListQuery.parse(request.query_params)
            except ValueError as exc:
                return Response(str(exc), 400)
            stream = _Stream((self.d.states,), self.d.keepalive_s, self.d.session_check_s, alive, 0.5)
            return stream.response(None, lambda: self.runs_html(session, query))
        facts_from, calls_from = request.query_params.get("facts_from"), request.query_params.get("calls_from")
        if facts_from is not None and not facts_from.isdigit():
            return Response(f"facts_from={facts_from!r}: give an offset (the first fact the page shows)", 400)
        feeds: tuple[ViewFeed, ...] = (_feed(self.d, _viewer(session, self.d.policy)),)
        # the run page reads the State, the facts and the audit too: any of them may come last
        feeds += tuple(f for f in (self.d.states, self.d.facts, self.d.audit) if f is not None and f is not feeds[0])
        stream = _Stream(feeds, self.d.keepalive_s, self.d.session_check_s, alive)
        since = None if facts_from is None else int(facts_from)
        return stream.response(run_id, lambda: self.run_html(session, run_id, since, calls_from))

    def command(self, build: Build) -> Callable[[Request], Any]:
        async def handle(request: Request) -> Response:
            return await _command(self.d, request, self.session_of(request), build)
        return handle


def shown(d: Dashboard, viewer: Viewer, run_id: str) -> dict[str, Any] | None:
    """The run as this viewer may see it (None: unknown, archived, or not theirs)."""
    state, keys = d.states.get(run_id), d.keys()
    owner, tenant = (None, None) if state is None else (reveal(state.userId, "userId", keys), state.tenant)
    if not viewer.may_see(owner, tenant):
        return None
    if viewer.role == "user":
        return page_view(d.views.get(run_id), viewer)
    return page_view(revealed_view(view_of(state, viewer.role), keys), viewer)


def _feed(d: Dashboard, viewer: Viewer) -> ViewFeed:
    """The feed whose changes change what this viewer sees."""
    return d.views if viewer.role == "user" else d.states


def create_app(d: Dashboard, manage_feed: bool = True) -> Starlette:
    """The Starlette app; with manage_feed it starts and stops the feeds with the server."""
    p = _Pages(d)

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        feeds = [f for f in (d.views, d.states, d.facts, d.audit, d.metrics) if f is not None]
        if manage_feed:
            for feed in feeds:
                feed.start()
        try:
            yield
        finally:
            if manage_feed:
                for feed in feeds:
                    feed.stop()
            d.commands.close()

    routes = [
        Route("/login", p.login_form, methods=["GET"]), Route("/login", p.login, methods=["POST"]),
        Route("/logout", p.logout, methods=["POST"]), Route("/", p.index), Route("/stream", p.stream),
        Route("/runs/{run_id}", p.run_page), Route("/runs/{run_id}/stream", p.stream),
        Route("/runs/{run_id}/facts", p.earlier), Route("/runs/{run_id}/calls", p.earlier),
        Route("/runs/{run_id}/approvals/{approval_id}", p.command(_resume), methods=["POST"]),
        Route("/runs/{run_id}/stop", p.command(_stop), methods=["POST"]),
        Route("/runs/{run_id}/cancel", p.command(_cancel), methods=["POST"]),
        Route("/runs/{run_id}/retry/{tool_call_id}", p.command(_retry), methods=["POST"]),
        Route("/runs/{run_id}/reauthorize/{approval_id}", p.command(_reauthorize), methods=["POST"]),
        Route("/runs/{run_id}/resolve-compensation", p.command(_resolve_compensation), methods=["POST"]),
        Route("/approvals", p.approvals), Route("/approvals/stream", p.stream),
        Route("/memory", p.memory), Route("/memory/stream", p.stream),
        Route("/runs/{run_id}/memories/{memory_id}", p.command(_review_memory), methods=["POST"]),
        Route("/health", p.health), Route("/dead-letters", p.letters),
        Route("/dead-letters/redrive", p.redrive, methods=["POST"]),
        Route("/static/dashboard.js", lambda r: Response(html.SCRIPT, media_type="application/javascript")),
        Route("/healthz", lambda r: _health(d)),
    ]
    return Starlette(routes=routes, lifespan=lifespan, middleware=[Middleware(SecurityHeaders)])


class SecurityHeaders:
    """ASGI middleware adding CSP and friends to every HTTP response."""

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def send_with_headers(message: Any) -> None:
            if message["type"] == "http.response.start":
                message["headers"] = list(message.get("headers", [])) + SECURITY_HEADERS
            await send(message)
        await self.app(scope, receive, send_with_headers)


def _health(d: Dashboard) -> Response:
    failed = next((f.error for f in (d.views, d.states) if f.error is not None), None)
    if failed is not None:
        return JSONResponse({"ok": False, "error": str(failed)}, 503)
    ready = d.views.ready.is_set() and d.states.ready.is_set()
    return JSONResponse({"ok": ready, "runs": len(d.states)}, 200 if ready else 503)


@dataclass
class _Stream:
    """An SSE stream over a feed that lives as long as its session."""

    feeds: tuple[ViewFeed, ...]
    keepalive_s: float
    check_s: float
    alive: Callable[[], bool]
    min_interval_s: float = 0.0  # at most one render per interval (a busy list)

    def response(self, run_id: str | None, render: Callable[[], str]) -> StreamingResponse:
        """Send the fragment now and after every change of the run (or any run); once the
        session ends, an `ended` event and the end of the stream."""
        queue = self.feeds[0].subscribe(run_id)
        for feed in self.feeds[1:]:
            feed.subscribe(run_id, queue)

        async def events() -> AsyncIterator[str]:
            try:
                yield html.sse("view", await run_in_threadpool(render))
                quiet = 0.0
                while True:
                    try:
                        await asyncio.wait_for(queue.get(), timeout=min(self.check_s, self.keepalive_s))
                    except TimeoutError:
                        if not self.alive():
                            yield html.sse("ended", "your session has ended: sign in again")
                            return
                        quiet += min(self.check_s, self.keepalive_s)
                        if quiet >= self.keepalive_s:
                            quiet = 0.0
                            yield ": keep-alive\n\n"
                        continue
                    if self.min_interval_s:
                        await asyncio.sleep(self.min_interval_s)
                    while not queue.empty():  # coalesce a burst into one render
                        queue.get_nowait()
                    if not self.alive():
                        yield html.sse("ended", "your session has ended: sign in again")
                        return
                    yield html.sse("view", await run_in_threadpool(render))
            finally:
                for feed in self.feeds:
                    feed.unsubscribe(queue)

        return StreamingResponse(events(), media_type="text/event-stream",
                                 headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})


def _csrf_passed(request: Request, session: Session, form: Any) -> bool:
    origin = request.headers.get("origin")
    if origin and urlsplit(origin).netloc != request.headers.get("host"):
        return False
    return csrf_ok(session.csrf, request.headers.get(CSRF_HEADER) or str(form.get(CSRF_FIELD, "")))


async def _command(d: Dashboard, request: Request, session: Session | None, build: Build) -> Response:
    """Steps: session, CSRF, the view the viewer sees, build from State at that view's version,
    send, answer with the outcome."""
    if session is None:
        return JSONResponse({"accepted": False, "message": "sign in first"}, 401)
    form = await request.form()
    if not _csrf_passed(request, session, form):
        return JSONResponse({"accepted": False, "message": "CSRF check failed: reload the page"}, 403)
    run_id, viewer = request.path_params["run_id"], _viewer(session, d.policy)
    # the State of a run no longer cached is read back from its topic: off the event loop
    state, view = await run_in_threadpool(lambda: (d.states.get(run_id), shown(d, viewer, run_id)))
    if state is None or view is None:
        return JSONResponse({"accepted": False, "message": f"no run {run_id}"}, 404)
    try:
        command = build(state, session, {**form, **request.path_params})
        command = command.model_copy(update={"expectedVersion": _shown_version(form, view)})
    except (ControlError, ValueError) as exc:
        return JSONResponse({"accepted": False, "message": str(exc)}, 409)
    tel = telemetry.current()
    try:
        with tel.span(f"dashboard send {command.commandType}", attributes={
                "runfacts.run_id": run_id, "runfacts.command_id": command.commandId}) as span:
            outcome = await run_in_threadpool(d.commands.send, command, span.headers())
    except InfrastructureError as exc:
        return JSONResponse({"accepted": False, "commandId": command.commandId,
                             "message": f"no answer: {exc}; the page updates when the run does"}, 504)
    if "application/json" not in request.headers.get("accept", ""):
        return RedirectResponse(f"/runs/{run_id}", 303)
    return JSONResponse({"accepted": outcome.accepted, "message": outcome.describe(),
                         "commandId": command.commandId, "events": [e.eventType for e in outcome.events]},
                        200 if outcome.accepted else 409)


def _shown_version(form: Any, view: Mapping[str, Any]) -> int:
    """The version of the run the page showed when the button was pressed (the form's hidden
    `version`): a page older than the run gets the decider's `stale_version`. A form without it
    (a hand-made POST) is taken at the version the dashboard shows now."""
    shown = str(form.get("version", "")).strip()
    if not shown:
        return int(view["version"])
    if not shown.isdigit():
        raise ValueError(f"version={shown!r}: the form's version must be the run version the page showed")
    return int(shown)


def _issue(session: Session) -> Issue:
    return Issue(session.identity.actor(AUTH_SOURCE), f"dash-{uuid.uuid4()}", datetime.now(UTC))


def _decision(id_param: str, noun: str, items: Callable[[RunState], Mapping[str, Any]], digest: str,
              build: Callable[[RunState, str, ApprovalDecision, Issue, str | None], CommandBase]) -> Build:
    """A signed decision (approve/reject) on one of the run's approvals or memory candidates,
    bound to its hash (`digest`: argsHash, candidateHash) and signed like an approval."""
    def command(state: RunState, session: Session, form: Any) -> CommandBase:
        decision, item_id = control.approval_decision(str(form.get("decision", ""))), form[id_param]
        item = items(state).get(item_id)
        if item is None:
            raise ControlError(f"run {state.runId} has no {noun} {item_id}")
        issue = _issue(session)
        token = sign_approval(ApprovalRequest(state.runId, item_id, getattr(item, digest), decision,
                                              session.identity.subject, getattr(item, "displayDigest", None)),
                              int(issue.issued_at.timestamp() * 1000))  # an approval: what its approver saw
        return build(state, item_id, decision, issue, token)
    return command


_resume = _decision("approval_id", "approval", lambda s: s.approvals, "argsHash", control.resume_command)
_review_memory = _decision("memory_id", "memory candidate", lambda s: s.memories, "candidateHash",
                           control.review_memory_command)


def _stop(state: RunState, session: Session, form: Any) -> CommandBase:
    return control.stop_command(state, _issue(session), "stopped from the dashboard")


def _cancel(state: RunState, session: Session, form: Any) -> CommandBase:
    return control.cancel_command(state, _issue(session), "cancelled from the dashboard")


def _retry(state: RunState, session: Session, form: Any) -> CommandBase:
    return control.retry_command(state, form["tool_call_id"], _issue(session))


def _resolve_compensation(state: RunState, session: Session, form: Any) -> CommandBase:
    return control.resolve_compensation_command(state, str(form.get("decision", "")), str(form.get("note", "")),
                                                _issue(session), str(form.get("tool_call_id", "")) or None)


def _reauthorize(state: RunState, session: Session, form: Any) -> CommandBase:
    return control.reauthorize_command(state, form["approval_id"], _issue(session))
