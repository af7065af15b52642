"""What the refund demo shows: the user view as read from the view topic (the decider
publishes it with the state, `runfacts.projections.user_view`), a timeline of the run's
events and the demo's own actions, an audit summary from the audit topic (the projector
writes it), and the checks.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from datetime import UTC, datetime
from typing import Any, NamedTuple

from rich.panel import Panel
from rich.table import Table

from runfacts.projections.audit.reducer import GENESIS, AuditRecord
from runfacts.schemas import events as ev
from runfacts.schemas.common import EventBase


def describe(event: EventBase) -> str:
    """One line about an event: its type and the payload fields a reader cares about."""
    p = event.payload
    keys = ("toolCallId", "approvalId", "reason", "attempt", "externalRequestId", "outcome", "status",
            "errorClass", "reasonCode", "detail", "lastError", "pendingVerifications")
    parts = [f"{k}={_short(getattr(p, k))}" for k in keys
             if getattr(p, k, None) not in (None, "", (), [])]
    if isinstance(event, ev.ToolCallDispatching):
        parts.append(f"leaseEpoch={event.payload.leaseEpoch}")
    return " ".join(parts)


def _short(value: Any) -> str:
    text = ",".join(value) if isinstance(value, tuple | list) else str(value)
    return text if len(text) <= 60 else text[:57] + "..."


class Entry(NamedTuple):
    """A timeline line: when, who, what."""

    at: float
    source: str
    text: str


def timeline(events: Iterable[EventBase], notes: Iterable[Entry]) -> list[Entry]:
    """The run's events (by occurredAt) and the demo's notes, in time order."""
    entries = [Entry(e.occurredAt.timestamp(), "event", f"[bold]{e.eventType}[/] {describe(e)}")
               for e in events]
    return sorted([*entries, *notes], key=lambda e: e.at)


def render_timeline(title: str, entries: list[Entry], t0: float) -> Table:
    table = Table(title=title, show_lines=False, expand=False)
    table.add_column("t+s", justify="right", style="cyan")
    table.add_column("", style="magenta")
    table.add_column("what")
    for entry in entries:
        source = "demo" if entry.source == "note" else entry.source
        table.add_row(f"{entry.at - t0:6.2f}", source, entry.text)
    return table


def _clock(epoch_ms: int) -> str:
    return datetime.fromtimestamp(epoch_ms / 1000, tz=UTC).strftime("%H:%M:%S")


def render_banner(banner: dict[str, Any] | None, where: str) -> Panel:
    """A user view's approval banner (plain words built from codes; no personal data)."""
    if banner is None:
        return Panel("(no approval pending)", title=where)
    body = (f"[bold yellow]Approval needed[/]: {banner['asks']}\n"
            f"risk {banner['risk']} · needs role {banner['requiredRole']} · expires "
            f"{_clock(banner['expiresAt'])} UTC · {' / '.join(banner['allowedDecisions'])} · {banner['approvalId']}")
    return Panel(body, title=where, border_style="yellow")


def render_view(view: dict[str, Any]) -> Panel:
    """The user view as the view topic holds it."""
    progress = view["progress"]
    lines = [f"run {view['runId']} · [bold]{view['statusLine']}[/] · status {view['status']} · "
             f"version {view['version']} · busy {view['isBusy']} · can stop {view['canStop']}"
             + (f" · can retry {', '.join(view['canRetry'])}" if view["canRetry"] else "")]
    if view["approvalBanner"]:
        lines.append(f"  banner: {view['approvalBanner']['asks']}")
    lines.append(f"  progress: {len(progress['verified'])} verified, {len(progress['open'])} open"
                 + (f", next: {progress['nextSafeAction']}" if progress["nextSafeAction"] else ""))
    return Panel("\n".join(lines), title=f"user view ({view['role']}, from the view topic)")


class AuditSummary(NamedTuple):
    """What a run's audit records in the audit topic say."""

    records: int
    counts: Counter[str]
    sequences_ok: bool
    """sequence 1..n in order, each prevHash the previous recordHash"""
    head: str
    actors: frozenset[str]
    """subjectRefs (digests) of the actors named"""


def audit_summary(records: list[AuditRecord]) -> AuditSummary:
    """Counts per event type and whether the chain's links follow each other."""
    prev, ok = GENESIS, True
    for number, record in enumerate(records, start=1):
        ok = ok and record.sequence == number and record.prevHash == prev
        prev = record.recordHash
    actors = frozenset(r.actor.subjectRef for r in records if r.actor is not None)
    return AuditSummary(len(records), Counter(r.event.eventType for r in records), ok, prev, actors)


def render_audit(title: str, summary: AuditSummary, events: int) -> Table:
    table = Table(title=title)
    table.add_column("event type")
    table.add_column("records", justify="right")
    for event_type, count in sorted(summary.counts.items()):
        table.add_row(event_type, str(count))
    table.add_row("[bold]total[/]", f"[bold]{summary.records}[/] for {events} events")
    table.add_row("chain", ("linked 1.." + str(summary.records)) if summary.sequences_ok else "[red]BROKEN[/]")
    table.add_row("chain head", summary.head[:16] + "…")
    table.add_row("actors (subject digests)", ", ".join(sorted(a[:18] + "…" for a in summary.actors)))
    return table


class Check(NamedTuple):
    """One assertion the demo makes about the outcome."""

    name: str
    ok: bool
    detail: str


def render_checks(checks: list[Check]) -> Table:
    table = Table(title="checks")
    table.add_column("")
    table.add_column("check")
    table.add_column("detail")
    for check in checks:
        table.add_row("[green]ok[/]" if check.ok else "[red]FAIL[/]", check.name, check.detail)
    return table
