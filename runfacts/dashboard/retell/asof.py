"""The run as it was at any fact, pure: `/runs/{id}?at=N` replays the run's first N facts with
the decider's own fold (`processors.decider.evolve`) and shows the state, the view and the
pending calls at that point, and what fact N changed (the diff to fact N-1).

What is shown is trimmed by role like the rest of the page: the state as a list of plain
lines with no personal field (who decided reads by name for auditors only, revealed with the
dashboard's keys), the view as the viewer's role reads it (`ops.views.view_of`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from runfacts.client.outcomes import Entry
from runfacts.ops.views import BUDGET_DIMENSIONS, Viewer, revealed_view, view_of
from runfacts.privacy.envelope import NO_KEYS, KeyView, reveal
from runfacts.processors.decider.evolve import CorruptLog, evolve, fold
from runfacts.processors.decider.state import RunState
from runfacts.schemas.pii import MASK

NONE_TEXT = "—"  # as on the rest of the page (`runpage.NONE_TEXT`)


@dataclass(frozen=True)
class Change:
    """One line of the state or view that fact N changed."""

    key: str
    before: str  # NONE_TEXT: not there before
    after: str  # NONE_TEXT: gone after


@dataclass(frozen=True)
class AsOf:
    """The run after its first `number` facts (of `total`)."""

    run_id: str
    number: int
    total: int
    fact: Any  # fact `number` in words as the timeline says it (`runpage.Fact`), None: not given
    version: int
    lines: tuple[tuple[str, str], ...]  # the state, trimmed: (what, value)
    view: dict[str, Any] | None
    pending: tuple[str, ...]  # tool calls not settled then
    changes: tuple[Change, ...]
    problem: str = ""  # the facts could not be replayed (say why), else ""


def snapshot(state: RunState | None, viewer: Viewer, keys: KeyView = NO_KEYS) -> dict[str, str]:
    """The state (and the viewer's view of it) as plain lines, without personal fields."""
    if state is None:
        return {}
    auditor = viewer.role == "auditor"
    reason = state.statusReason if state.statusReason not in (None, "", state.status) else None
    lines = {"status": state.status.replace("_", " ") + (f" ({reason.replace('_', ' ')})" if reason else ""),
             "version": str(state.version), "turns": str(state.turnCount)}
    limits, used = state.budget.limits.model_dump(), state.budget.used.model_dump()
    for d in BUDGET_DIMENSIONS:
        if limits[d] or used[d]:
            lines[f"budget {d}"] = f"{used[d]} of {limits[d] or 'no limit'}"
    for c in state.toolCalls.values():
        lines[f"call {c.toolCallId}"] = (f"{c.action} on {c.target}: {c.execution.replace('_', ' ')}, verification "
                                         f"{c.verification.replace('_', ' ')}, attempts {c.attempts}"
                                         + (f", error {c.errorClass}" if c.errorClass else "")
                                         + (f", closed ({c.closedReason})" if c.closedReason else ""))
    for a in state.approvals.values():
        by = ""
        if a.decidedBy:
            by = f" by {reveal(a.decidedBy, 'subjectId', keys) if auditor else MASK}"
        lines[f"approval {a.approvalId}"] = f"{a.status}{by} (role {a.requiredRole.replace('_', ' ')})"
    for child in state.children.values():
        lines[f"child run {child.childRunId}"] = child.status.replace("_", " ")
    if state.progress.verifiedItems or state.progress.openItems:
        lines["progress"] = (f"{len(state.progress.verifiedItems)} verified, {len(state.progress.openItems)} open")
    view = _view(state, viewer, keys)
    if view is not None:
        lines["view: status line"] = str(view["statusLine"])
        banner = view.get("approvalBanner")
        lines["view: approval banner"] = str(banner["asks"]) if banner else "none"
    return lines


def _view(state: RunState, viewer: Viewer, keys: KeyView) -> dict[str, Any] | None:
    view = view_of(state, viewer.role)
    return revealed_view(view, keys) if viewer.role == "auditor" else view


def as_of(run_id: str, entries: Sequence[Entry], number: int, viewer: Viewer, keys: KeyView = NO_KEYS,
          fact: Any = None) -> AsOf:
    """The run after its first `number` facts (1 <= number <= len(entries): checked by the caller),
    and what fact `number` changed; `fact`: that fact in words (`runpage.timeline`'s), shown with it."""
    total = len(entries)
    try:
        before = fold(None, [e.event for e in entries[:number - 1]])
        after = evolve(before, entries[number - 1].event) if before is not None or number == 1 else None
    except CorruptLog as exc:
        return AsOf(run_id, number, total, fact, 0, (), None, (), (),
                    f"the run's facts up to {number} do not replay here: {exc} (older facts may have "
                    "been compacted away from the events topic)")
    if after is None:
        return AsOf(run_id, number, total, fact, 0, (), None, (), (),
                    f"no run yet at fact {number}: the first fact held here is not its run.created")
    old, new = snapshot(before, viewer, keys), snapshot(after, viewer, keys)
    changes = tuple(Change(k, old.get(k, NONE_TEXT), new.get(k, NONE_TEXT))
                    for k in [*new, *(k for k in old if k not in new)] if old.get(k) != new.get(k))
    pending = tuple(f"{c.toolCallId}: {c.action} on {c.target}, {c.execution.replace('_', ' ')}"
                    for c in after.toolCalls.values() if not c.settled and c.closedReason is None
                    and c.execution not in ("completed", "failed"))
    return AsOf(run_id, number, total, fact, after.version, tuple(new.items()), _view(after, viewer, keys),
                pending, changes)


def as_of_words(a: AsOf) -> str:
    """'as of fact 12 of 40 (version 11)'."""
    return f"as of fact {a.number} of {a.total}" + (f" (version {a.version})" if a.version else "")
