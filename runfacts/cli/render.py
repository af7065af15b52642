"""Rich rendering of the operator views (`runfacts inspect`, `runs list`, command outcomes)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from rich.console import Console, Group
from rich.markup import escape
from rich.panel import Panel
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    ProgressColumn,
    Task,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)
from rich.table import Table
from rich.text import Text

from runfacts.ops.control import Outcome


def duration(seconds: float | None) -> str:
    """'3d 4h', '12m 5s', '40s' (or '-' for None)."""
    if seconds is None:
        return "-"
    s = int(seconds)
    days, rest = divmod(s, 86400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    parts = [(days, "d"), (hours, "h"), (minutes, "m"), (secs, "s")]
    shown = [f"{n}{u}" for n, u in parts if n][:2]
    return " ".join(shown) or "0s"


def view_panel(view: dict[str, Any], source: str) -> Panel:
    """A user view (the UserView schema's fields) as a dashboard would show it."""
    grid = Table.grid(padding=(0, 2))
    grid.add_column(style="bold")
    grid.add_column()
    banner = view["approvalBanner"]
    progress = view["progress"]
    rows = [("status", f"{view['status']}: {view['statusLine']}"), ("version", str(view["version"])),
            ("busy", str(view["isBusy"])), ("can stop", str(view["canStop"])),
            ("can retry", ", ".join(view["canRetry"]) or "-"),
            ("approval", "-" if banner is None else f"{banner['approvalId']}: {banner['asks']} "
                                                    f"(role {banner['requiredRole']})"),
            ("progress", f"{len(progress['verified'])} verified, {len(progress['open'])} open; next: "
                         f"{progress['nextSafeAction'] or '-'}")]
    for label, value in rows:
        grid.add_row(label, escape(value))
    return Panel(grid, title=f"run {escape(view['runId'])} · {view['role']} view · {escape(source)}", expand=False)


def inspect_panel(summary: dict[str, Any]) -> Group:
    """The inspect screen: header, approvals, tool calls, budget, errors."""
    head = Table.grid(padding=(0, 2))
    head.add_column(style="bold")
    head.add_column()
    for label, value in [
        ("status", f"{summary['status']}" + (f" ({summary['statusReason']})" if summary["statusReason"] else "")),
        ("since", summary["statusSince"]), ("stuck for", duration(summary["stuckSeconds"])),
        ("version", str(summary["version"])), ("node", summary["node"] or "-"),
        ("active turn", summary["activeTurnId"] or "-"), ("next safe action", summary["nextSafeAction"] or "-"),
    ]:
        head.add_row(label, str(value))
    parts: list[Any] = [Panel(head, title=f"run {summary['runId']}", expand=False)]
    parts.append(_table("pending approvals", ["approvalId", "toolCallId", "risk", "requiredRole", "expiresAt"],
                        summary["pendingApprovals"]))
    parts.append(_table("tool calls", ["toolCallId", "capabilityId", "execution", "verification", "attempts",
                                       "errorClass", "reconciliation", "waiting"], summary["toolCalls"]))
    if summary["settledCalls"]:
        parts.append(f"{summary['settledCalls']} older settled calls compacted (their history: "
                     f"runfacts replay / the audit log)")
    budget = Table(title="budget", title_justify="left")
    for col in ("dimension", "used", "limit"):
        budget.add_column(col)
    for dim, v in summary["budget"].items():
        budget.add_row(dim, str(v["used"]), str(v["limit"]) if v["limit"] else "unlimited")
    parts.append(budget)
    errors = summary["errors"]
    parts.append("errors: " + ("; ".join(errors) if errors else "none"))
    return Group(*parts)


def _table(title: str, columns: list[str], rows: list[dict[str, Any]]) -> Any:
    if not rows:
        return f"{title}: none"
    table = Table(title=title, title_justify="left")
    for col in columns:
        table.add_column(col)
    for row in rows:
        table.add_row(*("-" if row.get(c) is None else str(row.get(c)) for c in columns))
    return table


def runs_table(rows: list[dict[str, Any]]) -> Table:
    table = Table(title=f"{len(rows)} runs", title_justify="left")
    for col in ("run", "status", "reason", "stuck for", "node", "approvals", "in flight", "retries", "orphans",
                "checkpoint lag", "version"):
        table.add_column(col)
    for r in rows:
        table.add_row(r["runId"], r["status"], r["statusReason"] or "-", duration(r["stuckSeconds"]),
                      r["node"] or "-", str(r["pendingApprovals"]), str(r["inFlight"]), str(r["retries"]),
                      str(len(r["orphanedCalls"])), duration(r["checkpointLagSeconds"]), str(r["version"]))
    return table


def versions_table(rows: list[dict[str, Any]]) -> Table:
    """`runs list --versions`: runs per pinned version."""
    table = Table(title="runs per pinned version", title_justify="left")
    for col in ("dimension", "version", "runs", "active", "calls in flight", "waiting for approval"):
        table.add_column(col)
    for r in rows:
        table.add_row(r["dimension"], r["version"], str(r["runs"]), str(r["active"]), str(r["inFlight"]),
                      str(r["waitingForApproval"]))
    return table


def migration_panel(plan: dict[str, Any]) -> Panel:
    """`runs migrate --dry-run`: what the migration would do, or why it is refused."""
    lines = [f"run {plan['runId']} ({plan['status']}), node {plan['node'] or '-'} -> {plan['toNode']}"]
    lines += [f"  {d}: {c['from']} -> {c['to']}" for d, c in plan["changes"].items()] or ["  versions unchanged"]
    lines.append(f"approvals that lapse (a new approval is asked): {len(plan['approvalsThatLapse'])}")
    lines += [f"  {a['approvalId']} ({a['status']}, expired {a['expiresAt']})" for a in plan["approvalsThatLapse"]]
    lines.append(f"calls that re-verify before anything new runs: {len(plan['callsThatReverify'])}")
    lines += [f"  {c['toolCallId']} {c['capabilityId']} {c['execution']}: {c['then']}"
              for c in plan["callsThatReverify"]]
    lines.append(f"fields this runfacts does not know: {', '.join(plan['unknownFields']) or 'none'}")
    if plan["refused"]:
        lines.append(f"[bold red]refused: {escape(plan['refused'])}[/]")
    return Panel("\n".join(lines), title="migration (dry run)" if not plan["refused"] else "migration refused")


def print_outcome(console: Console, outcome: Outcome) -> None:
    """The accepted events, one per line, or the rejection in red."""
    if outcome.rejection is not None:
        console.print(f"[bold red]{escape(outcome.describe())}[/]", highlight=False)
        return
    console.print(f"[green]accepted[/] {outcome.command.commandType} (command {outcome.command.commandId})",
                  highlight=False)
    for event in outcome.events:
        console.print(f"  {event.eventType}  {event.eventId}", highlight=False)


class RateColumn(ProgressColumn):
    """Records per second."""

    def render(self, task: Task) -> Text:
        speed = task.finished_speed or task.speed
        return Text("-- ev/s" if speed is None else f"{speed:,.0f} ev/s", style="progress.data.speed")


@contextmanager
def progress_bar(console: Console, what: str, total: int | None = None, *, transient: bool = True,
                 quiet: bool = False) -> Iterator[Callable[[int, int], None]]:
    """THE progress bar of every command (count, rate, elapsed, ETA; redrawn 4 times a second:
    about 1% of a core); yields update(done, total). `transient`: gone when done (the operator
    commands); `quiet`: not drawn at all."""
    columns = [TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), RateColumn(),
               TimeElapsedColumn(), TextColumn("eta"), TimeRemainingColumn()]
    with Progress(*columns, console=console, transient=transient, disable=quiet, refresh_per_second=4) as bar:
        task = bar.add_task(what, total=total)

        def update(done: int, total: int) -> None:
            bar.update(task, completed=done, total=max(total, done))
        yield update
        if total is not None:
            bar.update(task, completed=max(total, bar.tasks[0].completed))
