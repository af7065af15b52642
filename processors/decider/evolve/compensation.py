"""How compensation's facts change the run's state (docs/semantics.md §16): a plan per completed call that
declares a compensation, the run `compensating` while it undoes them, `compensated` at the end.
Pure."""

from __future__ import annotations

from typing import Any

from runfacts.processors.decider.evolve.run import CLOSABLE, Apply, CorruptLog, replace_value, status_change
from runfacts.processors.decider.state import CompensationPlan, RunState
from runfacts.schemas import events as ev


def _planned(s: RunState, e: ev.CompensationPlanned) -> dict[str, Any]:
    p = e.payload
    call = s.toolCalls.get(p.toolCallId)
    if call is None:
        raise CorruptLog(e, f"unknown toolCallId {p.toolCallId}")
    planned = CompensationPlan(toolCallId=p.toolCallId, capabilityId=p.compensationCapabilityId,
                               target=call.target, summary=call.summary, arguments=p.arguments, problem=p.problem)
    return {"compensations": {**s.compensations, p.toolCallId: planned}}


def _started(s: RunState, e: ev.CompensationStarted) -> dict[str, Any]:
    """The run compensates: a call that never ran never will (closed `run_compensating`)."""
    p = e.payload
    planned = s.compensations.get(p.toolCallId)
    if planned is None:
        raise CorruptLog(e, f"no compensation planned for {p.toolCallId}")
    calls = {k: replace_value(c, closedReason="run_compensating")
             if c.execution in CLOSABLE and c.closedReason is None else c for k, c in s.toolCalls.items()}
    plans = {**s.compensations, p.toolCallId: replace_value(planned, compensationToolCallId=p.compensationToolCallId)}
    return {**status_change(s, e, "compensating", p.reason), "compensations": plans, "toolCalls": calls,
            "compensating": s.compensating or p.reason}


def _resolved(s: RunState, e: ev.CompensationResolved) -> dict[str, Any]:
    """A person resolved the undo that stopped: `retry` lets it start again under its next id,
    `done_by_hand` counts it undone (the run compensates again: the next undo follows); `give_up`
    marks it, and the run's end follows in the same decision."""
    p = e.payload
    planned = s.compensations.get(p.toolCallId)
    if planned is None:
        raise CorruptLog(e, f"no compensation planned for {p.toolCallId}")
    if p.decision == "retry":
        plan = replace_value(planned, compensationToolCallId=None, retries=planned.retries + 1)
    else:
        plan = replace_value(planned, resolution="given_up" if p.decision == "give_up" else "done_by_hand")
    out: dict[str, Any] = {"compensations": {**s.compensations, p.toolCallId: plan},
                           "compensating": s.compensating or p.reason}
    if p.decision != "give_up":
        out.update(status_change(s, e, "compensating", p.reason))
    return out


def _compensated(s: RunState, e: ev.RunCompensated) -> dict[str, Any]:
    return status_change(s, e, "compensated", e.payload.reason)


COMPENSATION_APPLY: dict[str, Apply] = {
    "compensation.planned": _planned,
    "compensation.started": _started,
    "compensation.resolved": _resolved,
    "run.compensated": _compensated,
}
"""The cases of compensation's events."""
