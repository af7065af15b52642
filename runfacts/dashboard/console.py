"""The operator console's HTML, pure: the run page's timeline, tool-call tracks, approvals and
meters (`runpage.RunPage`), the run list, the approvals inbox, dead letters and health.

Older facts and tool calls are folded behind a "Show earlier" link (`earlier_control`): a plain
GET of the older page's fragment (`facts_fragment`, `calls_fragment`) that the script puts in
place of the link, and that works as a page of its own without the script.

Every value goes through `html.escape` (`_e`); no inline script or handler, so the page's
Content-Security-Policy (script-src 'self') holds; live parts are swapped by the one script.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import UTC, datetime, timedelta
from html import escape
from typing import Any

from runfacts.dashboard.charts import latency_chart
from runfacts.dashboard.retell.asof import AsOf, as_of_words
from runfacts.dashboard.runlist import FleetHealth, InboxRow, ListQuery, MemoryRow, RunList
from runfacts.dashboard.runpage import (
    EXECUTION_STEPS,
    NONE_TEXT,
    VERIFICATION_STEPS,
    CallsPage,
    CallTracks,
    ChildRow,
    Fact,
    FactsPage,
    RunPage,
    Turn,
    relative,
    text,
)

STYLE = """.tracks{display:grid;grid-template-columns:1fr 1fr;gap:1rem}.track ol{margin:.2rem 0;padding-left:1.2rem}
.step-failed,.step-result_unknown{color:#b00}.step-reconciled,.step-completed,.step-confirmed_success{color:#070}
.call{border:1px solid #ccc;padding:.5rem;margin:.5rem 0}.turn{margin:.5rem 0}.turn h3{margin:.3rem 0}
.meter{display:inline-block;width:10rem;height:.7rem;background:#eee;vertical-align:middle}
.meter span{display:block;height:100%;background:#36c}.facts td{font-size:.9rem}.pager a{margin-right:1rem}
.state-completed,.state-open{color:#070}.state-failed,.state-needs_review,.state-rejected,.state-cancelled{color:#b00}
.state-waiting_for_approval,.state-waiting_for_review,.state-paused,.state-expired{color:#a50}
.bar{display:inline-block;height:.8rem;background:#36c;vertical-align:middle}
.figures{display:flex;flex-wrap:wrap;gap:.5rem}.figure{border:1px solid #ccc;padding:.4rem .7rem;display:flex;
flex-direction:column;min-width:8rem}#fleet{margin-bottom:.7rem}
.story{font-size:1.1rem;border-left:4px solid #36c;padding:.3rem .8rem;background:#f4f7fc;max-width:60rem}
#run-filters{display:flex;flex-wrap:wrap;gap:.4rem 1rem;align-items:center;margin:0 0 1rem;padding:.6rem .8rem;
border:1px solid #ccc;background:#fafafa}#as-of th[scope=row]{text-align:left;font-weight:normal;color:#333}
#as-of caption{text-align:left;font-weight:bold;padding:.3rem 0}.as-of-mark{color:#a50}
.asked-by{font-weight:bold}#as-of-range{width:24rem;vertical-align:middle}#as-of-slider{margin:.5rem 0}"""


def _words(code: str) -> str:
    """A status or reason code in words ('waiting_for_approval' -> 'waiting for approval')."""
    return code.replace("_", " ")


def _e(value: Any) -> str:
    return escape(text(value))


def _csrf(token: str) -> str:
    return f'<input type="hidden" name="csrf" value="{escape(token)}">'


def run_console(page: RunPage, csrf: str) -> str:
    """The run page's console sections (inside the live fragment)."""
    return (f'<div id="console" data-facts="{page.fact_count}">{_summary(page)}{_subject(page)}{_audit(page)}'
            f'{_resolve(page, csrf)}{_family(page)}{_meters(page)}{_approvals(page, csrf)}{_calls(page)}'
            f'{_timeline(page)}</div>')


def _resolve(page: RunPage, csrf: str) -> str:
    """An operator's decision about the undo the run stopped at (`compensation.resolve`)."""
    if page.stopped_undo is None:
        return ""
    call = escape(page.stopped_undo)
    options = "".join(f'<option value="{v}">{escape(w)}</option>' for v, w in (
        ("retry", "try the undo again"), ("done_by_hand", "I undid it by hand"),
        ("give_up", "give up: leave the rest undone, the run ends failed")))
    return (f'<form id="resolve-compensation" class="command" method="post" action="/runs/{escape(page.run_id)}/'
            f'resolve-compensation">{_csrf(csrf)}{_version(page.version)}<input type="hidden" name="tool_call_id" '
            f'value="{call}"><p>Undoing {call} stopped for a person.</p><label>Decision <select name="decision">'
            f'{options}</select></label> <label>Note <input name="note" maxlength="500" placeholder="what you did, '
            'or why (kept in the audit trail)"></label> <button id="resolve">Resolve</button></form>')


def story_header(page: RunPage) -> str:
    """The run in plain words (`story.story`): the page puts it under the run's heading."""
    if not page.story.sentences:
        return ""
    return f'<p id="run-story" class="story">{escape(page.story.text)}</p>'


def _family(page: RunPage) -> str:
    """The run's parent (a link) and its child runs as a tree, each linked to its own page."""
    parent = (f'<p id="parent-run">child run of <a href="/runs/{escape(page.parent)}">{escape(page.parent)}</a></p>'
              if page.parent else "")
    if not page.children:
        return parent
    return f'{parent}<h2>Child runs</h2><ul id="child-runs" class="tree">{_children(page.children)}</ul>'


def _children(rows: Sequence[ChildRow]) -> str:
    out = []
    for c in rows:
        own = f"{_e(_words(c.run_status))} · " if c.run_status != NONE_TEXT else ""
        reason = f" ({_e(_words(c.reason))})" if c.reason != NONE_TEXT else ""
        told = "not reported yet" if c.status == "requested" else f"reported {_words(c.status)}"
        held = "released" if c.released else "reserved"
        below = f'<ul>{_children(c.children)}</ul>' if c.children else ""
        out.append(f'<li data-child="{escape(c.run_id)}" data-status="{escape(c.status)}"><a href="/runs/'
                   f'{escape(c.run_id)}">{escape(c.run_id)}</a> {own}<span class="state-{escape(c.status)}">'
                   f'{_e(told)}</span>{reason} · budget {_e(c.reserved)} ({held}) · used {_e(c.used)}{below}</li>')
    return "".join(out)


def earlier_control(run_id: str, part: str, earlier: int, before: Any) -> str:
    """The link to the page just before `before` ('facts' or 'calls'), saying how many are folded."""
    if earlier <= 0 or before is None:
        return ""
    noun = "facts" if part == "facts" else "tool calls"
    return (f'<p class="earlier"><a class="show-earlier" data-part="{part}" href="/runs/{escape(run_id)}/{part}?'
            f'before={escape(str(before))}">Show earlier {noun} ({earlier} more)</a></p>')


def _folded(run_id: str, part: str, earlier: int, before: Any) -> str:
    """The box the older pages unfold into (the script keeps it across live updates)."""
    return (f'<div id="earlier-{part}" class="folded" data-before="{escape(str(before))}">'
            f'{earlier_control(run_id, part, earlier, before)}</div>')


def facts_fragment(run_id: str, page: FactsPage) -> str:
    """A page of older facts: the link to the ones older still, then its turns."""
    return earlier_control(run_id, "facts", page.earlier, page.before) + _turns(run_id, page.turns)


def calls_fragment(run_id: str, page: CallsPage) -> str:
    """A page of older tool calls: the link to the ones older still, then the calls."""
    return earlier_control(run_id, "calls", page.earlier, page.before) + "".join(_call(c) for c in page.calls)


def _audit(page: RunPage) -> str:
    a = page.audit
    if a is None:
        return ""
    if a.records == 0:
        return '<p id="audit" data-verified="none">audit chain: no record yet</p>'
    state = "verifies" if a.verified else f"DOES NOT VERIFY: {escape(a.problem)}"
    behind = f" · {a.unaudited} fact(s) not audited yet" if a.unaudited else ""
    return (f'<p id="audit" data-verified="{"yes" if a.verified else "no"}">audit chain: {a.records} records, '
            f'head #{a.sequence} <code>{escape(a.head[:16])}</code> · <strong>{state}</strong>{behind}</p>')


SUBJECT = {
    "erased": "The run's data subject was erased: their keys are gone, so every personal field (goal, user, "
              "the people who acted, the tools' words) reads [erased] for every role, auditors included. "
              "The facts, ids, hashes and the audit chain stay.",
    "protected": "Personal fields are sealed; auditors read them here, other roles read [redacted].",
    "plain": "This run's personal fields were recorded without the privacy envelope (not erasable by key).",
}


def _subject(page: RunPage) -> str:
    if not page.subject:
        return ""
    return (f'<p id="subject-status" class="subject subject-{escape(page.subject)}" data-subject="'
            f'{escape(page.subject)}"><strong>data subject: {escape(page.subject)}</strong> — '
            f'{escape(SUBJECT[page.subject])}</p>')


def _summary(page: RunPage) -> str:
    tenant = f" · tenant <span id=\"tenant\">{_e(page.tenant)}</span>" if page.tenant is not None else ""
    review = ' · <strong id="needs-review">needs review</strong>' if page.needs_review else ""
    return (f'<p id="run-summary">goal <span id="goal-summary">{_e(page.goal)}</span> · status '
            f'{_e(_words(page.status))} ({_e(_words(page.status_reason))}) since {stamp(page.status_since)}'
            f'{tenant}{review} · checkpoint '
            f'{_e(page.checkpoint)} · versions {_e(", ".join(f"{k} {v}" for k, v in page.versions.items()))}</p>')


def _meters(page: RunPage) -> str:
    if not page.meters:
        return ""
    rows = "".join(
        f'<tr data-meter="{_e(m.name)}"><td>{_e(m.name)}</td><td><span class="meter"><span style="width:'
        f'{m.fraction * 100:.0f}%"></span></span></td><td>{m.used} of {m.limit if m.limit else "no limit"}'
        f'{f" ({m.reserved} reserved for child runs)" if m.reserved else ""}</td></tr>'
        for m in page.meters)
    return f'<h2>Budget</h2><table id="budget">{rows}</table>'


def _approvals(page: RunPage, csrf: str) -> str:
    if not page.approvals:
        return ""
    rows = []
    for a in page.approvals:
        action = ""
        if a.can_reauthorize:
            action = (f'<form class="command" method="post" action="/runs/{escape(page.run_id)}/reauthorize/'
                      f'{escape(a.approval_id)}">{_csrf(csrf)}{_version(page.version)}<button class="reauthorize" '
                      f'data-approval="{escape(a.approval_id)}">Request re-authorization</button></form>')
        elif a.awaits_reauthorization:  # the policy lets this viewer's roles not propose a call
            action = ('<span class="reauthorize-note">waiting for re-authorization: the agent proposes the call '
                      'again (tool.call.propose), then the new approval is decided</span>')
        decided = (f'<br><span class="decided-by">by {_e(a.decided_by)}</span>, {_e(a.decided_at)}'
                   if a.decided_by != NONE_TEXT else "")
        rows.append(
            f'<tr data-approval="{escape(a.approval_id)}" data-status="{escape(a.status)}"><td>{_e(a.approval_id)}'
            f'<br><span class="muted">{_e(a.tool_call_id)} · role {_e(a.required_role)} · argsHash '
            f'<code>{_e(a.args_hash[:12])}</code></span></td>'
            f'<td><span class="asked-by">{_e(a.asked_by)}</span><br><span class="muted">for {_e(a.requested_by)}'
            f'</span><br><span class="why">{_e(a.why)}</span></td>'
            f'<td>{arguments_list(a.arguments)}{changed_list(a.changed)}</td>'
            f'<td><span class="approval-status state-{escape(a.status)}">{_e(a.status)}</span>{decided}</td>'
            f'<td>{stamp(a.expires_at)}</td><td>{action}</td></tr>')
    return ('<h2>Approvals</h2><table id="approvals"><tr><th>approval</th><th>asked by, why</th><th>arguments</th>'
            f'<th>status</th><th>expires</th><th></th></tr>{"".join(rows)}</table>')


def _version(version: int) -> str:
    """The version of the run the page shows: the command carries it as expectedVersion, so a
    stale page is refused (`stale_version`)."""
    return f'<input type="hidden" name="version" value="{version}">'


def changed_list(changed: Sequence[str]) -> str:
    """What the arguments change from the previous proposal of the same action and target."""
    if not changed:
        return ""
    return ('<p class="changed"><strong>changed since the previous proposal:</strong></p><ul class="changes">'
            + "".join(f"<li><code>{escape(line)}</code></li>" for line in changed) + "</ul>")


def stamp(at: datetime | None, now: datetime | None = None) -> str:
    """An absolute time with its zone ('2026-12-06 10:42 UTC'), relative in words when `now` is given."""
    if at is None:
        return NONE_TEXT
    absolute = at.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
    rel = f" ({relative(at, now)})" if now is not None else ""
    return f'<time datetime="{escape(at.isoformat())}">{escape(absolute)}{escape(rel)}</time>'


def arguments_list(lines: Sequence[str]) -> str:
    """An approval's arguments, one per line (the display's lines, already trimmed by role)."""
    if not lines:
        return '<span class="muted">not shown</span>'
    return '<ul class="arguments">' + "".join(f"<li><code>{escape(line)}</code></li>" for line in lines) + "</ul>"


def _track(name: str, steps: Sequence[Any], current: str, happy: Sequence[str]) -> str:
    done = [s.name for s in steps]
    items = "".join(f'<li class="step step-{escape(s.name)}" data-step="{escape(s.name)}">{_e(s.name)} '
                    f'<span class="muted">{stamp(s.at)}{" · " + escape(s.detail) if s.detail else ""}</span></li>'
                    for s in steps)
    ahead = "".join(f'<li class="muted step-ahead">{escape(n)}</li>' for n in happy if n not in done
                    and n != current and _after(current, n, happy))
    return (f'<div class="track track-{name}" data-current="{escape(current)}"><strong>{name}</strong>: '
            f'{escape(current)}<ol>{items}{ahead}</ol></div>')


def _after(current: str, step: str, happy: Sequence[str]) -> bool:
    return current in happy and happy.index(step) > happy.index(current)


def _call(c: CallTracks) -> str:
    key = (f' · idempotency key <code class="idempotency-key">{_e(c.idempotency_key)}</code>'
           if c.idempotency_key is not None else "")
    return (f'<div class="call" data-call="{escape(c.tool_call_id)}"><h3>{_e(c.tool_call_id)} · {_e(c.action)} '
            f'({_e(c.capability)})</h3><p>attempts {c.attempts} · external request '
            f'<code>{_e(c.external_request_id)}</code> · error class {_e(c.error_class)} · reconciliation '
            f'{_e(c.reconciliation)} · closed {_e(c.closed_reason)}{key}</p>{_failures(c)}<div class="tracks">'
            f'{_track("execution", c.execution_steps, c.execution, EXECUTION_STEPS)}'
            f'{_track("verification", c.verification_steps, c.verification, VERIFICATION_STEPS)}</div></div>')


def _failures(c: CallTracks) -> str:
    """Every failed or lost attempt of the call: when, the error, retryable, the provider's words."""
    if not c.failures:
        return ""
    rows = "".join(f'<tr class="failure" data-attempt="{f.attempt}"><td>{f.attempt}</td><td>{stamp(f.at)}</td>'
                   f'<td>{_e(f.error_class)}</td><td>{_e(f.retryable)}</td><td class="error-detail">{_e(f.detail)}'
                   '</td></tr>' for f in c.failures)
    return ('<table class="failures"><caption>Errors</caption><tr><th>attempt</th><th>when</th><th>error</th>'
            f'<th>retryable</th><th>what the tool said</th></tr>{rows}</table>')


def _calls(page: RunPage) -> str:
    if not page.calls:
        return '<h2>Tool calls</h2><p class="muted" id="no-calls">No tool calls yet.</p>'
    folded = _folded(page.run_id, "calls", page.earlier_calls, page.calls_before) if page.earlier_calls else ""
    return (f'<h2>Tool calls ({page.earlier_calls + len(page.calls)})</h2><div id="calls">{folded}'
            f'{"".join(_call(c) for c in page.calls)}</div>')


def _turns(run_id: str, turns: Sequence[Turn]) -> str:
    groups = []
    for turn in turns:
        rows = "".join(f'<tr data-event="{escape(f.event_type)}" data-offset="{f.offset}"><td>{_as_of_link(run_id, f)}'
                       f'{stamp(f.at)}</td>'
                       f'<td class="actor">{_e(f.actor)}</td><td>{_e(f.words)}</td>'
                       f'<td><code>{_e(f.event_id)}</code></td></tr>' for f in turn.facts)
        groups.append(f'<section class="turn"><h3>{_e(turn.label)}</h3><table class="facts">{rows}</table></section>')
    return "".join(groups)


def _as_of_link(run_id: str, f: Fact) -> str:
    """The link to the run as it was right after this fact."""
    if not f.number:
        return ""
    return (f'<a class="as-of-link" href="/runs/{escape(run_id)}?at={f.number}" aria-label="the run as of fact '
            f'{f.number}">#{f.number}</a> ')


def as_of_section(a: AsOf) -> str:
    """The run as of fact N of M: that fact, what it changed, the state, view and pending calls
    then, and links to the facts around it and to the live run."""
    run = escape(a.run_id)
    link = lambda n, label, rel: (f'<a id="as-of-{rel}" href="/runs/{run}?at={n}">{label}</a>'  # noqa: E731
                                  if 1 <= n <= a.total and n != a.number else f'<span class="muted">{label}</span>')
    nav = (f'<nav class="as-of-nav" aria-label="facts">{link(1, "first fact", "first")} · '
           f'{link(a.number - 1, "previous fact", "previous")} · {link(a.number + 1, "next fact", "next")} · '
           f'{link(a.total, "last fact", "last")} · <a id="as-of-live" href="/runs/{run}">the live run</a></nav>'
           f'<form id="as-of-slider" method="get" action="/runs/{run}"><label>fact <input type="range" name="at" '
           f'id="as-of-range" min="1" max="{a.total}" value="{a.number}"></label> '
           '<button id="as-of-go">Show this fact</button></form>')
    fact = ""
    if a.fact is not None:
        f = a.fact
        fact = (f'<p id="as-of-fact" data-event="{escape(f.event_type)}"><strong>Fact {a.number}</strong>: '
                f'{_e(f.words)} <span class="muted">({escape(f.event_type)}, {stamp(f.at)}, by {_e(f.actor)})'
                '</span></p>')
    head = (f'<section id="as-of" data-fact="{a.number}" data-total="{a.total}" data-version="{a.version}">'
            f'<h1>Run {run} <span class="as-of-mark">{escape(as_of_words(a))}</span></h1>'
            f'<p class="banner" role="note">You are looking at the past: the run as it was right after fact '
            f'{a.number} of {a.total}. Nothing here can be changed.</p>{nav}{fact}')
    if a.problem:
        return f'{head}<p role="alert" id="as-of-problem">{escape(a.problem)}</p></section>'
    changes = "".join(f'<tr data-key="{escape(c.key)}"><th scope="row">{escape(c.key)}</th><td>{_e(c.before)}</td>'
                      f'<td>{_e(c.after)}</td></tr>' for c in a.changes)
    diff = (f'<table id="as-of-diff"><caption>What fact {a.number} changed</caption><tr><th scope="col">what'
            f'</th><th scope="col">before (fact {a.number - 1})</th><th scope="col">after</th></tr>{changes}</table>'
            if changes else f'<p id="as-of-diff" class="muted">Fact {a.number} changed nothing shown here.</p>')
    lines = "".join(f'<tr data-key="{escape(k)}"><th scope="row">{escape(k)}</th><td>{_e(v)}</td></tr>'
                    for k, v in a.lines)
    pending = ("".join(f"<li>{escape(p)}</li>" for p in a.pending) if a.pending
               else '<li class="muted">none</li>')
    view = ""
    if a.view is not None:
        banner = a.view.get("approvalBanner")
        view = (f'<dl id="as-of-view"><dt>status line</dt><dd>{_e(a.view["statusLine"])}</dd><dt>approval banner</dt>'
                f'<dd>{_e(banner["asks"] if banner else "none")}</dd></dl>')
    return (f'{head}{diff}<h2>State then</h2><table id="as-of-state">{lines}</table><h2>View then</h2>{view}'
            f'<h2>Pending calls then</h2><ul id="as-of-pending">{pending}</ul></section>')


def _timeline(page: RunPage) -> str:
    if not page.turns and not page.earlier_facts:
        return '<h2>Timeline</h2><p class="muted" id="no-facts">No facts read yet.</p>'
    folded = _folded(page.run_id, "facts", page.earlier_facts, page.facts_before) if page.earlier_facts else ""
    return (f'<h2>Timeline ({page.fact_count} facts)</h2><div id="timeline">{folded}'
            f'{_turns(page.run_id, page.turns)}</div>')


def when_or_none(at: datetime | None) -> str:
    return NONE_TEXT if at is None else text(at)


def runs_filters(query: ListQuery, staff: bool, people: bool = False) -> str:
    """The run list's filter and search form (a plain GET: works without the script; every
    filter lands in the URL, so a filtered list can be shared). `staff`: the tenant filter
    (operators, auditors); `people`: the user filter (any staff role: an end user sees only
    their own runs anyway)."""
    statuses = ("", "running", "waiting_for_approval", "waiting_for_review", "needs_review", "paused",
                "completed", "failed", "cancelled", "compensating", "compensated")
    options = "".join(f'<option value="{s}"{" selected" if s == query.status else ""}>{_words(s) or "any status"}'
                      '</option>' for s in statuses)

    def field(name: str, label: str, value: str, size: int, kind: str = "text", hint: str = "") -> str:
        placeholder = f' placeholder="{escape(hint)}"' if hint else ""
        return (f'<label>{label} <input type="{kind}" name="{name}" id="filter-{name}" value="{escape(value)}" '
                f'size="{size}"{placeholder}></label> ')

    tenant = field("tenant", "tenant", query.tenant, 8) if staff else ""
    user = field("user", "user", query.user, 12, hint="user id") if people else ""
    return (f'<form id="run-filters" method="get" action="/" role="search">'
            f'<label>run id <input name="q" id="search" value="{escape(query.q)}" size="18"></label> '
            f'<label>status <select name="status" id="filter-status">{options}</select></label> {user}'
            f'{field("capability", "capability", query.capability, 14, hint="payments.refund")}'
            f'{field("error", "error class", query.error, 10, hint="refused")}'
            f'{field("since", "started from", query.since, 16, "datetime-local")}'
            f'{field("until", "to", query.until, 16, "datetime-local")}'
            f'<label><input type="checkbox" name="review" value="1" id="filter-review"'
            f'{" checked" if query.needs_review else ""}> needs review</label> '
            f'{field("stuck", "stuck longer than", query.stuck, 4, hint="10m")}'
            f'{tenant}<button id="apply-filters">Filter</button> <a href="/" id="clear-filters">clear</a></form>')


def runs_table(runs: RunList, now: datetime) -> str:
    """One page of the run list, with its pager."""
    if not runs.rows:
        return f'<p id="no-runs" class="muted" data-total="{runs.total}">No runs match.</p>'
    staff = runs.rows[0].tenant is not None
    head = "".join(f"<th>{h}</th>" for h in ("run", "goal", "status", "last change", "pending approvals",
                                            "calls in flight", "review", *(("tenant",) if staff else ())))
    rows = []
    for r in runs.rows:
        stuck = f' <span class="muted">(stuck {relative(now - r.stuck, now)[:-4]})</span>' if (
            r.stuck is not None and r.stuck.total_seconds() >= 600) else ""
        tenant = f"<td>{_e(r.tenant)}</td>" if staff else ""
        reason = f" ({escape(_words(r.status_reason))})" if r.status_reason not in ("", r.status) else ""
        rows.append(
            f'<tr data-run="{escape(r.run_id)}" data-status="{escape(r.status)}"><td><a href="/runs/'
            f'{escape(r.run_id)}">{escape(r.run_id)}</a></td><td>{_e(r.goal)}</td><td><span class="state '
            f'state-{escape(r.status)}">{escape(_words(r.status))}</span>'
            f'{reason}{stuck}</td>'
            f'<td title="{_e(r.updated_at)}">{escape(relative(r.updated_at, now))}</td>'
            f'<td class="pending">{r.pending_approvals}</td><td class="in-flight">{r.in_flight}</td>'
            f'<td>{"needs review" if r.needs_review else ""}</td>{tenant}</tr>')
    q, page = runs.query, runs.query.page
    prev = f'<a id="prev-page" href="/?{escape(q.query_string(page=page - 1))}">previous</a>' if page > 1 else ""
    nxt = (f'<a id="next-page" href="/?{escape(q.query_string(page=page + 1))}">next</a>'
           if page < runs.pages else "")
    return (f'<table id="runs" data-total="{runs.total}"><tr>{head}</tr>{"".join(rows)}</table>'
            f'<p class="pager" id="pager">{prev}<span>page {page} of {runs.pages} · {runs.total} runs</span>{nxt}</p>')


def countdown(expires_at: datetime, now: datetime) -> str:
    """Time left as text, kept current by the script (data-expires: epoch ms)."""
    left = (expires_at - now).total_seconds()
    label = "expired" if left <= 0 else span_words(left)
    return (f'<span class="countdown" data-expires="{int(expires_at.timestamp() * 1000)}">'
            f'{escape(label)}</span>')


def inbox_table(rows: Sequence[InboxRow], now: datetime, csrf: str) -> str:
    """Pending approvals the viewer may decide, oldest first, with Approve/Reject (commands)."""
    if not rows:
        return '<p id="inbox-empty" class="muted">No approvals waiting for you.</p>'
    staff = rows[0].tenant is not None
    out = []
    for r in rows:
        action = f"/runs/{escape(r.run_id)}/approvals/{escape(r.approval_id)}"
        tenant = f"<td>{_e(r.tenant)}</td>" if staff else ""
        out.append(
            f'<tr data-approval="{escape(r.approval_id)}" data-run="{escape(r.run_id)}"><td><a href="/runs/'
            f'{escape(r.run_id)}">{escape(r.run_id)}</a></td><td>{_e(r.action)} {_e(r.target)} ({_e(r.risk)} risk)'
            f'<br><span class="asked-by">asked by {_e(r.asked_by)}</span> <span class="muted">for {_e(r.asked_for)}'
            f'</span><br><span class="why">{_e(r.why)}</span><br><span class="muted">argsHash '
            f'<code>{_e(r.args_hash[:12])}</code></span></td><td>{arguments_list(r.arguments)}</td>'
            f'<td>{countdown(r.expires_at, now)}</td>{tenant}<td><form class="command" method="post" '
            f'action="{action}">{_csrf(csrf)}{_version(r.version)}<button class="approve" name="decision" '
            'value="approve">Approve</button> '
            f'<button class="reject" name="decision" value="reject">Reject</button></form></td></tr>')
    head = "".join(f"<th>{h}</th>" for h in ("run", "asks: who, for whom, why", "arguments", "expires in",
                                            *(("tenant",) if staff else ()), ""))
    return f'<table id="inbox"><tr>{head}</tr>{"".join(out)}</table>'


def memory_table(rows: Sequence[MemoryRow], now: datetime, csrf: str, may_decide: bool) -> str:
    """Pending memory candidates, oldest first, with Confirm/Reject (ReviewMemory commands) when
    the viewer's roles may decide them."""
    if not rows:
        return '<p id="memory-empty" class="muted">No memory candidates waiting for review.</p>'
    staff = rows[0].tenant is not None
    out = []
    for r in rows:
        m = r.memory
        action = f"/runs/{escape(r.run_id)}/memories/{escape(m.memoryId)}"
        buttons = (f'<form class="command" method="post" action="{action}">{_csrf(csrf)}<button class="confirm" '
                   'name="decision" value="approve">Confirm</button> <button class="reject" name="decision" '
                   'value="reject">Reject</button></form>') if may_decide else ""
        tenant = f"<td>{_e(r.tenant)}</td>" if staff else ""
        out.append(
            f'<tr data-memory="{escape(m.memoryId)}" data-run="{escape(r.run_id)}"><td><a href="/runs/'
            f'{escape(r.run_id)}">{escape(r.run_id)}</a></td><td>{_e(m.memoryId)}</td><td>{_e(m.statementRef)}</td>'
            f'<td>{_e(m.scope)}</td><td>{m.evidence} fact{"s" if m.evidence != 1 else ""}</td><td>{_e(m.proposedBy)}'
            f'</td><td><code>{_e(m.candidateHash[:16])}</code></td><td>{countdown(m.expiresAt, now)}</td>{tenant}'
            f'<td>{buttons}</td></tr>')
    head = "".join(f"<th>{h}</th>" for h in ("run", "memory", "statement", "scope", "evidence", "proposed by",
                                            "candidate hash", "expires in", *(("tenant",) if staff else ()), ""))
    return f'<table id="memories"><tr>{head}</tr>{"".join(out)}</table>'


def letters_table(letters: Sequence[Any], csrf: str, may_redrive: bool,
                  previews: Mapping[str, tuple[str, str, str]] | None = None) -> str:
    """Dead letters (runfacts.ops.dlq.DeadLetter): the run, where it came from, why, what it carries
    (`previews` by position: the run key, a redacted preview, or why it does not decode:
    `letters.preview`); a redrive button where one can land."""
    if not letters:
        return '<p id="no-letters" class="muted">No dead letters.</p>'
    rows = []
    for x in letters:
        r = x.reasons
        version = f" v{r['schemaVersion']}" if r["schemaVersion"] else ""
        run, body, problem = (previews or {}).get(x.position, ("", "", ""))
        button = ""
        if may_redrive and r["topic"] and not x.redriven_to and not problem:
            button = (f'<form method="post" action="/dead-letters/redrive">{_csrf(csrf)}<input type="hidden" '
                      f'name="position" value="{escape(x.position)}"><button class="redrive">Redrive</button></form>')
        elif problem:
            button = '<span class="muted">not redrivable: it does not decode</span>'
        run_link = f'<a href="/runs/{escape(run)}">{escape(run)}</a>' if run else NONE_TEXT
        shown = f'<code>{escape(body)}</code>' if body else f'<span class="problem">{escape(problem)}</span>'
        rows.append(
            f'<tr data-position="{escape(x.position)}" data-run="{escape(run)}"><td>{escape(x.position)}<br>'
            f'<span class="muted">from {_e(r["topic"])}[{_e(r["partition"])}]@{_e(r["offset"])}</span></td>'
            f'<td class="run">{run_link}</td><td>{_e(r["schema"] + version)}<br><span class="muted">refused by '
            f'{_e(r["app"])}</span></td><td>{_e(r["error"])}</td><td class="payload">{shown}</td>'
            f'<td class="redriven-to">{_e(x.redriven_to)}</td><td>{button}</td></tr>')
    head = "".join(f"<th>{h}</th>" for h in ("dead letter", "run", "schema", "reason", "payload", "redriven to", ""))
    return f'<table id="letters"><tr>{head}</tr>{"".join(rows)}</table>'


def latency_section(metrics: Mapping[str, Sequence[Mapping[str, Any]]] | None) -> str:
    """Commit latency p50/p99 per processor (an SVG chart each), its last measured interval's numbers,
    the commits over the kept records and the lag the newest record reports."""
    if metrics is None:
        return '<h2>Commit latency</h2><p class="muted" id="no-metrics">The metrics topic is not followed.</p>'
    if not metrics:
        return ('<h2>Commit latency</h2><p class="muted" id="no-metrics">No engine has published metrics yet '
                '(every interval, `RUNFACTS_METRICS_INTERVAL_MS`).</p>')
    rows = []
    for app, records in metrics.items():
        measured = [r for r in records if r.get("commitLatencyMs")] or [records[-1]]
        commit, batch = measured[-1].get("commitLatencyMs") or {}, measured[-1].get("batchRecords") or {}
        lag = sum(int(x["lag"]) for x in records[-1].get("lag", []))  # the newest record's
        rows.append(f'<tr data-app="{escape(app)}"><td>{escape(app)}</td><td class="p50">{_e(commit.get("p50"))}</td>'
                    f'<td class="p99">{_e(commit.get("p99"))}</td><td>{sum(int(r["commits"]) for r in records)}</td>'
                    f'<td>{_e(batch.get("p50"))} / {_e(batch.get("p99"))}</td><td>{lag}</td></tr>')
    charts = "".join(f'<figure class="chart">{latency_chart(app, records)}</figure>'
                     for app, records in metrics.items())
    return ('<h2>Commit latency</h2><div id="latency">' + charts + '</div><table id="latency-last"><tr>'
            '<th>processor</th><th>p50 ms</th><th>p99 ms</th><th>commits (shown window)</th>'
            '<th>records a batch p50 / p99</th><th>lag it knows now</th></tr>' + "".join(rows) + '</table>')


def fleet_section(fleet: FleetHealth | None) -> str:
    """Fleet-wide health (stuck, retries, orphans, checkpoint lag, policy denials by reason) and
    the runs that need a look, worst first."""
    if fleet is None:
        return ""
    denials = ", ".join(f"{reason.replace('_', ' ')} {n}" for reason, n in fleet.denials.items()) or "none"
    facts = "" if fleet.checkpoint_facts_max is None else f"{fleet.checkpoint_facts_max} facts, "
    cells = (("runs", str(fleet.runs)), ("stuck", f"{fleet.stuck} (longest {relative_span(fleet.longest_stuck)})"),
             ("retries", str(fleet.retries)), ("orphaned calls", str(fleet.orphans)),
             ("largest checkpoint lag", f"{facts}{relative_span(fleet.checkpoint_lag_max)}"),
             ("policy denials", denials))
    summary = "".join(f'<div class="figure" data-figure="{escape(k)}"><span class="muted">{escape(k)}</span>'
                      f'<strong>{escape(v)}</strong></div>' for k, v in cells)
    rows = "".join(
        f'<tr data-run="{escape(r.run_id)}"><td><a href="/runs/{escape(r.run_id)}">{escape(r.run_id)}</a></td>'
        f'<td>{escape(r.status)}</td><td>{escape(relative_span(r.stuck)) if r.stuck is not None else NONE_TEXT}</td>'
        f'<td class="retries">{r.retries}</td><td class="orphans">{r.orphans}</td><td class="checkpoint-lag">'
        f'{"" if r.checkpoint_facts is None else f"{r.checkpoint_facts} facts, "}{relative_span(r.checkpoint_lag)}'
        f'</td><td class="denials">{escape(", ".join(f"{k} {n}" for k, n in r.denials.items()) or NONE_TEXT)}</td>'
        '</tr>' for r in fleet.worst)
    table = (('<table id="run-health"><tr><th>run</th><th>status</th><th>stuck for</th><th>retries</th>'
              f'<th>orphaned calls</th><th>checkpoint lag</th><th>policy denials</th></tr>{rows}</table>')
             if rows else '<p class="muted" id="no-attention">No run needs a look.</p>')
    return f'<h2>Runs</h2><div id="fleet" class="figures">{summary}</div>{table}'


def halted_section(halted: Sequence[Mapping[str, Any]] | None, now_ms: int | None = None) -> str:
    """The partitions an engine halted on a stored record newer than its code (docs/ops.md "A record
    newer than the code"): which processor, instance and partition, why, as of which metrics record.
    Nothing when the metrics topic is not followed (the page says so under commit latency)."""
    if halted is None:
        return ""
    if not halted:
        return '<p class="muted" id="no-halted">No partition is halted.</p>'
    rows = "".join(
        f'<tr data-app="{escape(h["app"])}" data-instance="{escape(h["instance"])}" data-partition="{h["partition"]}">'
        f'<td>{escape(h["app"])}</td><td>{escape(h["instance"])}</td><td>{h["partition"]}</td>'
        f'<td class="why">{escape(h["why"])}</td><td>{escape(_as_of(int(h["atMs"]), now_ms))}</td></tr>'
        for h in halted)
    return ('<h2 role="alert">Halted partitions: <span id="halted-count">' + str(len(halted)) + '</span></h2>'
            '<p>A stored record newer than the code halted these partitions: their runs wait, the others go on. '
            'Fix: upgrade the instance (or let an upgraded one take the partition over); it resumes from its '
            'last commit.</p><table id="halted"><tr><th>processor</th><th>instance</th><th>partition</th>'
            f'<th>why</th><th>as of</th></tr>{rows}</table>')


def _as_of(at_ms: int, now_ms: int | None) -> str:
    if now_ms is None:
        return str(at_ms)
    return f"{span_words(max(0, now_ms - at_ms) / 1000)} ago"


def health_page(lags: Sequence[Any], lag_error: str, stuck: Sequence[tuple[str, str, timedelta]],
                stuck_total: int, feeds: Sequence[tuple[str, str]],
                metrics: Mapping[str, Sequence[Mapping[str, Any]]] | None = None,
                fleet: FleetHealth | None = None, halted: Sequence[Mapping[str, Any]] | None = None,
                now_ms: int | None = None) -> str:
    """Halted partitions first, fleet health and the runs that need a look, lag per processor and
    partition (bars), commit latency, stuck runs, the dashboard's own feeds."""
    widest = max([x.lag for x in lags] + [100])
    if lag_error:
        lag_html = f'<p role="alert" id="lag-error">{escape(lag_error)}</p>'
    else:
        rows = "".join(
            f'<tr data-processor="{escape(x.processor)}" data-partition="{x.partition}"><td>{escape(x.processor)}'
            f'</td><td>{escape(x.topic)}[{x.partition}]</td><td>{_e(x.committed)}</td><td>{x.end}</td>'
            f'<td class="lag">{x.lag}</td><td><span class="bar" style="width:{200 * x.lag // widest}px">'
            '</span></td></tr>' for x in lags)
        lag_html = ('<table id="lag"><tr><th>processor</th><th>partition</th><th>committed</th><th>end</th>'
                    f'<th>lag</th><th></th></tr>{rows}</table>')
    stuck_rows = "".join(f'<tr data-run="{escape(run)}"><td><a href="/runs/{escape(run)}">{escape(run)}</a></td>'
                         f'<td>{escape(status)}</td><td>{escape(relative_span(for_))}</td></tr>'
                         for run, status, for_ in stuck)
    feed_rows = "".join(f"<li>{escape(name)}: {escape(state)}</li>" for name, state in feeds)
    return (f'{halted_section(halted, now_ms)}{fleet_section(fleet)}<h2>Consumer lag</h2>{lag_html}'
            f'{latency_section(metrics)}'
            f'<h2>Stuck runs: <span id="stuck-count">{stuck_total}</span></h2>'
            + (f'<table id="stuck"><tr><th>run</th><th>status</th><th>for</th></tr>{stuck_rows}</table>'
               if stuck_rows else '<p class="muted" id="no-stuck">No run is stuck.</p>')
            + f'<h2>Dashboard feeds</h2><ul id="feeds">{feed_rows}</ul>')


def span_words(seconds: float) -> str:
    """A duration in its two largest units: '29 d 23 h', '3 h 05 min', '14 min 05 s', '12 s' (the
    page's script counts down with the same words)."""
    left = int(seconds)
    for unit, size, small, small_size in (("d", 86400, "h", 3600), ("h", 3600, "min", 60), ("min", 60, "s", 1)):
        if left >= size:
            return f"{left // size} {unit} {(left % size) // small_size:02d} {small}"
    return f"{left} s"


def relative_span(span: timedelta) -> str:
    """A duration in its largest unit ('12 min')."""
    seconds = span.total_seconds()
    for unit, size in (("d", 86400), ("h", 3600), ("min", 60)):
        if seconds >= size:
            return f"{int(seconds // size)} {unit}"
    return f"{int(seconds)} s"
