"""What the refund demo shows: a user view derived from the run state, a timeline of the
run's events and the demo's own actions, an audit summary, and the checks.

`user_view` is a small stand-in for the projections package's user view (not on main when
the demo was written): it reads the authoritative run state only, never the events or
model text, so a vanished banner can never be mistaken for an approval.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from datetime import datetime
from typing import Any, NamedTuple

from rich.panel import Panel
from rich.table import Table

from runfacts.schemas.common import EventBase

BUSY = frozenset({"running", "cancelling"})
IN_FLIGHT = frozenset({"dispatching", "accepted", "result_unknown"})


def approval_banner(state: dict[str, Any]) -> dict[str, Any] | None:
    """The banner for the oldest open approval, or None."""
    for approval in state.get("approvals", {}).values():
        if approval["status"] == "open":
            return {"approvalId": approval["approvalId"], "summary": approval["summary"],
                    "risk": approval["risk"], "requiredRole": approval["requiredRole"],
                    "expiresAt": approval["expiresAt"]}
    return None


def user_view(state: dict[str, Any]) -> dict[str, Any]:
    """The user's view of a run: derived from State only (SEMANTICS §2)."""
    calls = state.get("toolCalls", {}).values()
    return {
        "runId": state["runId"], "version": state["version"], "status": state["status"],
        "statusReason": state.get("statusReason"),
        "isBusy": state["status"] in BUSY or any(c["execution"] in IN_FLIGHT for c in calls),
        "canStop": state["status"] not in ("completed", "failed", "cancelled"),
        "approvalBanner": approval_banner(state),
        "toolCalls": [{"toolCallId": c["toolCallId"], "summary": c["summary"], "execution": c["execution"],
                       "verification": c["verification"], "attempts": c["attempts"]} for c in calls],
    }


def describe(event: EventBase) -> str:
    """One line about an event: its type and the payload fields a reader cares about."""
    p = event.payload
    keys = ("toolCallId", "approvalId", "reason", "attempt", "externalRequestId", "outcome", "status",
            "errorClass", "reasonCode", "detail", "lastError", "pendingVerifications")
    parts = [f"{k}={_short(getattr(p, k))}" for k in keys
             if getattr(p, k, None) not in (None, "", (), [])]
    if event.eventType == "tool.call.dispatching":
        parts.append(f"leaseEpoch={p.leaseEpoch}")
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


def render_banner(banner: dict[str, Any] | None, where: str) -> Panel:
    if banner is None:
        return Panel("(no approval pending)", title=where)
    expires = datetime.fromisoformat(banner["expiresAt"]).strftime("%H:%M:%S")
    body = (f"[bold yellow]Approval needed[/]: {banner['summary']}\n"
            f"risk {banner['risk']} · needs role {banner['requiredRole']} · expires {expires} · "
            f"{banner['approvalId']}")
    return Panel(body, title=where, border_style="yellow")


def render_view(view: dict[str, Any]) -> Panel:
    lines = [f"run {view['runId']} · status [bold]{view['status']}[/]"
             + (f" ({view['statusReason']})" if view["statusReason"] else "")
             + f" · version {view['version']} · busy {view['isBusy']} · can stop {view['canStop']}"]
    for call in view["toolCalls"]:
        lines.append(f"  {call['toolCallId']}: {call['summary']} — execution [bold]{call['execution']}[/], "
                     f"verification [bold]{call['verification']}[/], attempts {call['attempts']}")
    if view["approvalBanner"]:
        lines.append(f"  banner: {view['approvalBanner']['summary']}")
    return Panel("\n".join(lines), title="user view (from run state)")


def audit_counts(events: Iterable[EventBase]) -> Counter[str]:
    return Counter(e.eventType for e in events)


def render_audit(title: str, counts: Counter[str], duplicates: int) -> Table:
    table = Table(title=title)
    table.add_column("event type")
    table.add_column("count", justify="right")
    for event_type, count in sorted(counts.items()):
        table.add_row(event_type, str(count))
    table.add_row("[bold]total[/]", f"[bold]{sum(counts.values())}[/]")
    table.add_row("duplicate eventIds", str(duplicates))
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
