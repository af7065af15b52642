"""How child runs and evidence change the run state (the `evolve` cases of
docs/decisions/0012-child-runs.md). Pure."""

from __future__ import annotations

from typing import Any

from runfacts.processors.decider.evolve.run import Apply, CorruptLog, add_amounts, replace_value, status_change
from runfacts.processors.decider.state import ChildState, RunState
from runfacts.schemas import events as ev
from runfacts.schemas.common import BudgetAmounts

REVIEWABLE = frozenset({"created", "running", "waiting_for_approval", "waiting_for_review"})
"""Statuses a child's review or an evidence conflict turns into needs_review (not cancelling,
not ended: the fact is recorded there, the status stays)."""


def _minus(a: BudgetAmounts, b: BudgetAmounts) -> BudgetAmounts:
    return add_amounts(a, BudgetAmounts(steps=-b.steps, toolCalls=-b.toolCalls, tokens=-b.tokens,
                                        wallTimeMs=-b.wallTimeMs, costMicros=-b.costMicros))


def _pooled(amounts: BudgetAmounts) -> BudgetAmounts:
    """Wall time is capped, never reserved: only the pooled dimensions move between runs."""
    return amounts.model_copy(update={"wallTimeMs": 0})


def _review(s: RunState, e: ev.EventBase, reason: str) -> dict[str, Any]:
    return status_change(s, e, "needs_review", reason) if s.status in REVIEWABLE else {}


def _requested(s: RunState, e: ev.ChildRunRequested) -> dict[str, Any]:
    p = e.payload
    child = ChildState(childRunId=p.childRunId, reserved=_pooled(p.budget))
    reserved = add_amounts(s.budget.reserved, child.reserved)
    return {"children": {**s.children, p.childRunId: child},
            "budget": replace_value(s.budget, reserved=reserved)}


def _reported(s: RunState, e: ev.ChildRunReported) -> dict[str, Any]:
    p = e.payload
    child = s.children.get(p.childRunId)
    if child is None:
        raise CorruptLog(e, f"{p.childRunId} is no child of this run")
    if p.status == "needs_review":
        return {"children": {**s.children, p.childRunId: replace_value(child, status=p.status, reason=p.reason)},
                **_review(s, e, "child_needs_review")}
    ended = replace_value(child, status=p.status, reason=p.reason, used=p.used)
    budget = replace_value(s.budget, reserved=_minus(s.budget.reserved, child.reserved),
                           used=add_amounts(s.budget.used, _pooled(p.used)))
    return {"children": {**s.children, p.childRunId: ended}, "budget": budget}


def _appended(s: RunState, e: ev.EvidenceAppended) -> dict[str, Any]:
    item = e.payload.item
    if item.evidenceId in s.evidenceItems:
        raise CorruptLog(e, f"evidence {item.evidenceId} is already held: the ledger is append-only")
    return {"evidenceItems": {**s.evidenceItems, item.evidenceId: item}}


def _merged(s: RunState, e: ev.EvidenceMerged) -> dict[str, Any]:
    ledger = dict(s.evidenceItems)
    for item in e.payload.items:
        ledger.setdefault(item.evidenceId, item)  # an equal item already held stays as it was
    changes: dict[str, Any] = {"evidenceItems": ledger}
    return {**changes, **_review(s, e, "evidence_overflow")} if e.payload.overflow else changes


def _conflict(s: RunState, e: ev.EvidenceConflictDetected) -> dict[str, Any]:
    return _review(s, e, "evidence_conflict")


def _linked(s: RunState, e: ev.ParentLinked) -> dict[str, Any]:
    return {"parentRunId": e.payload.parentRunId}


CHILD_APPLY: dict[str, Apply] = {
    "child.requested": _requested,
    "child.reported": _reported,
    "run.parent_linked": _linked,
    "evidence.appended": _appended,
    "evidence.merged": _merged,
    "evidence.conflict_detected": _conflict,
}
