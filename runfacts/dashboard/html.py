"""The dashboard's HTML, pure: pages and the live fragments the SSE streams push.

Everything user-visible goes through `html.escape`. Pages load one script
(`/static/dashboard.js`, no inline script, so the Content-Security-Policy can forbid them);
the script swaps `#live` with each fragment the stream sends (keeping the older pages of facts
and tool calls it has unfolded: a "Show earlier" link fetches one with `X-Fragment: 1`, and the
stream is then asked for everything from the page's first fact and call on) and submits command forms
with fetch, showing the decider's answer in `#command-status`. Forms work without the
script too (plain POST, redirect back).
"""

from __future__ import annotations

from datetime import UTC, datetime
from html import escape
from typing import Any

from runfacts.dashboard.console import STYLE as CONSOLE_STYLE
from runfacts.dashboard.console import arguments_list, changed_list
from runfacts.dashboard.runpage import text

SCRIPT = """(function () {
  const live = document.getElementById('live');
  let source = null;
  function listen(url) {
    if (source) source.close();
    source = new EventSource(url);
    source.addEventListener('view', function (e) {
      const unfolded = Array.from(live.querySelectorAll('.folded[data-unfolded]'));
      live.innerHTML = e.data;
      unfolded.forEach(function (box) {  // the older pages already fetched stay in place
        const fresh = document.getElementById(box.id);
        if (fresh) fresh.replaceWith(box);
      });
      live.dataset.updated = Date.now();
    });
    source.addEventListener('ended', function (e) {
      source.close();
      const note = document.createElement('p');
      note.id = 'session-ended';
      note.setAttribute('role', 'alert');
      note.textContent = e.data + ' ';
      const link = document.createElement('a');
      link.href = '/login';
      link.textContent = 'Sign in';
      note.appendChild(link);
      live.replaceChildren(note);
    });
  }
  if (live && live.dataset.stream) listen(live.dataset.stream);
  document.addEventListener('click', async function (ev) {
    const link = ev.target.closest ? ev.target.closest('a.show-earlier') : null;
    const box = link ? link.closest('.folded') : null;
    if (!box || !live || !live.contains(box)) return;
    ev.preventDefault();
    let pinned = null;
    if (source && !live.dataset.pinned) {
      // from now on the stream renders everything from the first fact and call shown on, so
      // nothing between an unfolded page and the live part is skipped when new facts arrive
      source.close();
      const pins = ['facts', 'calls'].map(function (part) {
        const folded = document.getElementById('earlier-' + part);
        return folded ? part + '_from=' + encodeURIComponent(folded.dataset.before) : '';
      }).filter(Boolean);
      const url = live.dataset.stream;
      pinned = url + (url.indexOf('?') < 0 ? '?' : '&') + pins.join('&');
      live.dataset.pinned = '1';
    }
    const id = box.id, href = link.href;
    link.textContent = 'loading...';
    try {
      const resp = await fetch(href, {credentials: 'same-origin', headers: {'X-Fragment': '1'}});
      const page = await resp.text();
      const current = document.getElementById(id);
      const control = current ? current.querySelector('.earlier') : null;
      if (!resp.ok) {
        if (control) control.textContent = 'could not load the earlier page: ' + resp.status;
      } else if (control) {
        control.outerHTML = page;
        current.dataset.unfolded = '1';
      }
    } finally {
      if (pinned) listen(pinned);
    }
  });
  function words(left) {  // console.span_words: the two largest units
    const units = [['d', 86400, 'h', 3600], ['h', 3600, 'min', 60], ['min', 60, 's', 1]];
    for (const [unit, size, small, smallSize] of units) {
      if (left >= size) {
        return Math.floor(left / size) + ' ' + unit + ' '
          + String(Math.floor((left % size) / smallSize)).padStart(2, '0') + ' ' + small;
      }
    }
    return left + ' s';
  }
  function tick() {
    document.querySelectorAll('.countdown[data-expires]').forEach(function (el) {
      const left = Math.floor((Number(el.dataset.expires) - Date.now()) / 1000);
      el.textContent = left <= 0 ? 'expired' : words(left);
    });
  }
  setInterval(tick, 1000);
  document.addEventListener('submit', async function (ev) {
    const form = ev.target;
    if (!form.classList.contains('command')) return;
    ev.preventDefault();
    const data = new FormData(form, ev.submitter);
    const status = document.getElementById('command-status');
    status.textContent = 'sent; waiting for the run decider...';
    status.dataset.outcome = 'pending';
    try {
      const resp = await fetch(form.action, {method: 'POST', body: data, credentials: 'same-origin',
        headers: {'X-CSRF-Token': data.get('csrf'), 'Accept': 'application/json'}});
      const out = await resp.json();
      status.textContent = out.message;
      status.dataset.outcome = out.accepted ? 'accepted' : (resp.status === 504 ? 'unanswered' : 'rejected');
    } catch (e) {
      status.textContent = 'not sent: ' + e;
      status.dataset.outcome = 'error';
    }
  });
})();
"""

STYLE = """body{font-family:sans-serif;margin:2rem;max-width:80rem}table{border-collapse:collapse}
td,th{border:1px solid #ccc;padding:.2rem .5rem}.banner{border:2px solid #c60;background:#fff4e5;padding:1rem;
margin:1rem 0}.muted{color:#666}header{display:flex;gap:1rem;align-items:center}"""


NAV = ('<nav><a href="/" id="nav-runs">Runs</a> · <a href="/approvals" id="nav-approvals">Approvals</a> · '
       '<a href="/memory" id="nav-memory">Memory</a> · <a href="/dead-letters" id="nav-letters">Dead letters</a> · '
       '<a href="/health" id="nav-health">Health</a></nav>')


def page(title: str, body: str, user: str | None = None, csrf: str | None = None) -> str:
    """A full page around `body`."""
    logout = ""
    if user is not None and csrf is not None:
        logout = (f'<span>signed in as {escape(user)}</span><form method="post" action="/logout">'
                  f'{_csrf(csrf)}<button id="logout">Sign out</button></form>'
                  f'<form method="post" action="/logout">{_csrf(csrf)}<input type="hidden" name="everywhere" '
                  'value="1"><button id="logout-everywhere">Sign out everywhere</button></form>')
    return (f'<!doctype html><html lang="en"><head><meta charset="utf-8"><title>{escape(title)} - runfacts</title>'
            f'<style>{STYLE}{CONSOLE_STYLE}</style><script src="/static/dashboard.js" defer></script></head><body>'
            f'<header><a href="/">runfacts</a>{NAV if user is not None else ""}{logout}'
            f'</header><main>{body}</main></body></html>')


def _csrf(token: str) -> str:
    return f'<input type="hidden" name="csrf" value="{escape(token)}">'


def login_page(csrf: str, error: str | None = None) -> str:
    message = f'<p id="login-error" role="alert">{escape(error)}</p>' if error else ""
    body = (f'<h1>Sign in</h1>{message}<form method="post" action="/login">{_csrf(csrf)}'
            '<label>User <input name="username" id="username" autocomplete="username" required></label> '
            '<label>Password <input name="password" id="password" type="password" '
            'autocomplete="current-password" required></label> <button id="sign-in">Sign in</button></form>')
    return page("Sign in", body)


def live(stream: str, fragment: str) -> str:
    """The container the script keeps current from `stream`."""
    return f'<div id="live" data-stream="{escape(stream)}">{fragment}</div>'


def run_fragment(view: dict[str, Any] | None, csrf: str, console: str = "", asking: Any = None,
                 story: str = "") -> str:
    """One run as the viewer may see it (a user view plus buttons): status, approval banner,
    actions, progress, operations detail for operators and auditors, then `console` (the
    timeline, tool-call tracks and approvals: `console.run_console`). `asking`: the banner's
    approval as the run page reads it (`runpage.ApprovalRow`: arguments, who asked, why). `story`:
    the run in plain words (`console.story_header`), right under its heading."""
    if view is None:
        return '<p id="run-missing" class="muted">No such run (or not yours to see).</p>'
    run = escape(view["runId"])
    auditor = view.get("auditor")
    goal = f'<p id="goal">{escape(auditor["goalSummary"])}</p>' if auditor else ""
    return (f'<section id="run" data-run="{run}" data-version="{view["version"]}"><h1>Run {run}</h1>{story}{goal}'
            f'<p id="status-line">{escape(view["statusLine"])}</p>'
            f'<p>status: <strong id="run-status" class="state state-{escape(view["status"])}" data-status="'
            f'{escape(view["status"])}">{escape(view["status"].replace("_", " "))}</strong>'
            f'{" (working)" if view["isBusy"] else ""}</p>{_banner(view, csrf, asking)}{_actions(view, csrf)}'
            f'{_progress(view["progress"])}{_operator(view.get("operator"))}{console}</section>')


def when(epoch_ms: int) -> str:
    """An epoch-ms timestamp with its zone ('2026-12-06 10:42:05 UTC')."""
    return datetime.fromtimestamp(epoch_ms / 1000, tz=UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def _version(view: dict[str, Any]) -> str:
    """The version of the view on screen: the command carries it as expectedVersion."""
    return f'<input type="hidden" name="version" value="{int(view["version"])}">'


def _banner(view: dict[str, Any], csrf: str, asking: Any = None) -> str:
    banner = view["approvalBanner"]
    if banner is None:
        return ""
    summary = f' <span id="approval-summary">{escape(banner["summary"])}</span>' if banner["summary"] else ""
    buttons = ""
    if view["canDecide"]:
        action = f'/runs/{escape(view["runId"])}/approvals/{escape(banner["approvalId"])}'
        buttons = (f'<form class="command" method="post" action="{action}">{_csrf(csrf)}{_version(view)}'
                   '<button id="approve" name="decision" value="approve">Approve</button> '
                   '<button id="reject" name="decision" value="reject">Reject</button></form>')
    context = ""
    if asking is not None and asking.approval_id == banner["approvalId"]:
        context = (f'<dl class="asking"><dt>arguments</dt><dd id="approval-arguments">'
                   f'{arguments_list(asking.arguments)}{changed_list(asking.changed)}</dd><dt>asked by</dt>'
                   '<dd id="approval-asked-by">'
                   f'{escape(asking.asked_by)}</dd><dt>why</dt><dd id="approval-why">{escape(asking.why)}</dd></dl>')
    return (f'<div id="approval-banner" class="banner" data-approval="{escape(banner["approvalId"])}">'
            f'<strong>Approval needed</strong>: <span id="approval-asks">{escape(banner["asks"])}</span> '
            f'(asked of a {escape(banner["requiredRole"].replace("_", " "))}, expires '
            f'{escape(when(banner["expiresAt"]))}){summary}{context}{buttons}</div>')


def _progress(progress: dict[str, Any]) -> str:
    items = "".join(f"<li>{escape(i)} (verified)</li>" for i in progress["verified"]) + "".join(
        f"<li>{escape(i)}</li>" for i in progress["open"])
    nxt = f'<p>next safe action: {escape(progress["nextSafeAction"])}</p>' if progress["nextSafeAction"] else ""
    return f'<div id="progress"><ul>{items}</ul>{nxt}</div>' if items or nxt else ""


def _operator(detail: dict[str, Any] | None) -> str:
    """Operations detail (operator and auditor views): no personal data."""
    if detail is None:
        return ""
    failed = "".join(f'<tr><td>{escape(text(c["toolCallId"]))}</td><td>{escape(text(c["errorClass"]))}</td>'
                     f'<td>{escape(text(c["retryable"]))}</td><td>{c["attempts"]}</td></tr>'
                     for c in detail["failedCalls"])
    table = (f'<table id="failed-calls"><tr><th>failed call</th><th>error class</th><th>retryable</th>'
             f'<th>attempts</th></tr>{failed}</table>') if failed else ""
    return (f'<div id="operator"><p>since {escape(when(detail["statusSince"]))} · node '
            f'{escape(text(detail["checkpointNode"]))} · turns {detail["turnCount"]} · open approvals '
            f'{detail["openApprovals"]} · in flight: {escape(", ".join(detail["inFlight"]) or "none")}</p>'
            f'{table}</div>')


def _actions(view: dict[str, Any], csrf: str) -> str:
    run = escape(view["runId"])
    forms = []
    if view["canStop"]:
        forms.append(f'<form class="command" method="post" action="/runs/{run}/stop">{_csrf(csrf)}{_version(view)}'
                     '<button id="stop">Stop</button></form>')
    if view["canCancel"]:
        forms.append(f'<form class="command" method="post" action="/runs/{run}/cancel">{_csrf(csrf)}{_version(view)}'
                     '<button id="cancel">Cancel</button></form>')
    for call in view["canRetry"]:
        forms.append(f'<form class="command" method="post" action="/runs/{run}/retry/{escape(call)}">'
                     f'{_csrf(csrf)}{_version(view)}<button>Retry {escape(call)}</button></form>')
    return f'<div id="actions">{"".join(forms)}</div>' if forms else ""


def sse(event: str, data: str) -> str:
    """One server-sent event (multi-line data split into data: lines)."""
    lines = "".join(f"data: {line}\n" for line in data.split("\n"))
    return f"event: {event}\n{lines}\n"
