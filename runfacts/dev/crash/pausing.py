"""The crash row of a pause during dispatch (docs/dispatcher.md "Paused capabilities").

Wave 1's refunds are claimed and executing at a slow provider (its answers held back
`LATENCY_MS`) when an operator pauses `payments.refund` (`tool.pause`, as `runfacts tools pause`
sends it); wave 2's refunds are approved while it is paused; the dispatcher is killed -9 at
`dispatcher.after_call_before_record` when the first of wave 1's tries answers (the provider
executed it, nothing is reported). A new incarnation reads the pause board whole, reconciles
wave 1 (lookups go on while paused) and holds wave 2 across its restart; the operator resumes;
wave 2 is claimed and executed once. Besides the matrix's oracle and the provider's ledger (one
refund per authorized call), `pause_problems` checks the pause itself on the facts.
"""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING

from runfacts.dev.crash.workload import OPERATOR, REFUND, Commands, Input, valid
from runfacts.processors.decider.commands.run import tool_control_run_id
from runfacts.schemas import commands as cmd
from runfacts.schemas import events as ev

if TYPE_CHECKING:
    from runfacts.dev.crash.oracle import Expected

LATENCY_MS = 9_000
"""How long the provider holds back each answer: wave 1 is still executing while the pause
lands and wave 2 is held."""


def wave(stage_prefix: str, first: int, count: int) -> list[tuple[str, str]]:
    """(run, call) ids of `count` refund runs starting at number `first`."""
    return [(f"{stage_prefix}-run-{i:03d}", f"call-{stage_prefix}-{i:03d}") for i in range(first, first + count)]


def approved(c: Commands, runs: list[tuple[str, str]]) -> list[Input]:
    """Each run created, its refund proposed and approved."""
    return [valid(x) for run, call in runs for x in (c.create(run), c.propose(run, call), c.resume(run, call))]


def control(c: Commands, pause: bool, reason: str) -> Input:
    """The operator's `tool.pause` / `tool.resume` of the refund capability (what the CLI sends)."""
    kind = cmd.PauseTool if pause else cmd.ResumeTool
    return valid(c.make(kind, tool_control_run_id(REFUND), OPERATOR, capabilityId=REFUND, reason=reason))


def control_at(expected: Expected, kind: type[ev.EventBase]) -> datetime | None:
    """When the refund capability was paused (`ev.ToolPaused`) or resumed, per the facts."""
    for event in expected.events.get(tool_control_run_id(REFUND), []):
        if isinstance(event, kind):
            return event.occurredAt
    return None


def calls_in(expected: Expected, runs: list[tuple[str, str]], test: str) -> bool:
    """Whether every call of `runs` is in the folded state and `test` holds for it:
    "dispatching", "held" (waits for the pause), "verified"."""
    for run, call_id in runs:
        state = expected.states.get(run)
        call = state.toolCalls.get(call_id) if state is not None else None
        if call is None:
            return False
        ok = {"dispatching": call.execution == "dispatching",
              "held": call.held is not None and call.execution == "authorized",
              "verified": call.verification == "confirmed_success"}[test]
        if not ok:
            return False
    return True


def pause_problems(expected: Expected, refunds: list, in_flight: list[tuple[str, str]],
                   held: list[tuple[str, str]]) -> list[str]:
    """What the facts and the provider's ledger say against the pause's rules:
    - the pause and the resume are facts, the resume after the pause;
    - no refund the provider executed was dispatched (its lease's `tool.call.dispatching`) between
      the pause and the resume unless the dispatcher held that dispatch (`tool.call.held` after it:
      an authorization carrying the lease, ADR 0011, run after the resume), and no dispatcher
      claimed any call in that window;
    - each call of `in_flight` was dispatched before the pause (the row paused mid-dispatch);
    - each call of `held` was reported held (`tool.call.held`; again only after something else
      happened to the call: a hold a new incarnation turned into result_unknown, reconciled
      not_found, is held again as a claim) and dispatched exactly once after the resume."""
    paused, resumed = control_at(expected, ev.ToolPaused), control_at(expected, ev.ToolResumed)
    if paused is None or resumed is None or resumed < paused:
        return [f"the pause and its resume are not facts in that order (paused {paused}, resumed {resumed})"]
    problems: list[str] = []
    dispatches: dict[tuple[str, int], ev.ToolCallDispatching] = {}
    at_once: set[tuple[str, int]] = set()
    per_call: dict[str, list[ev.ToolCallDispatching]] = {}
    held_reports: dict[str, int] = {}
    held_dispatches: set[tuple[str, int]] = set()  # (call, epoch) dispatched, then held: run after the resume
    for events in expected.events.values():
        leases: dict[str, int] = {}
        last: dict[str, str] = {}  # each call's latest event type
        epoch_of: dict[str, int] = {}  # each call's latest dispatch
        for e in events:
            if isinstance(e, ev.ToolCallAuthorized) and e.payload.leaseEpoch is not None:
                leases[e.payload.toolCallId] = e.payload.leaseEpoch
            elif isinstance(e, ev.ToolCallDispatching):
                p = e.payload
                dispatches[(p.toolCallId, p.leaseEpoch)] = e
                per_call.setdefault(p.toolCallId, []).append(e)
                epoch_of[p.toolCallId] = p.leaseEpoch
                if leases.get(p.toolCallId) == p.leaseEpoch:
                    at_once.add((p.toolCallId, p.leaseEpoch))
                elif paused <= e.occurredAt < resumed:
                    problems.append(f"{e.runId}/{p.toolCallId}: claimed (epoch {p.leaseEpoch}) while paused")
            elif isinstance(e, ev.ToolCallHeld):
                call_id = e.payload.toolCallId
                held_reports[call_id] = held_reports.get(call_id, 0) + 1
                if call_id in epoch_of:
                    held_dispatches.add((call_id, epoch_of[call_id]))
                if last.get(call_id) == "tool.call.held":
                    problems.append(f"{e.runId}/{call_id}: tool.call.held twice in a row for one pause")
            call_of = getattr(e.payload, "toolCallId", None)
            if isinstance(call_of, str):
                last[call_of] = e.eventType
    calls = {call.idempotencyKey: call.toolCallId for s in expected.states.values() for call in s.toolCalls.values()}
    for refund in refunds:
        call_id = calls.get(refund.idempotency_key, "?")
        dispatch = dispatches.get((call_id, refund.lease_epoch))
        if dispatch is None:
            problems.append(f"refund {refund.refund_id} ({call_id}, epoch {refund.lease_epoch}): no dispatch fact")
        elif paused <= dispatch.occurredAt < resumed and (call_id, refund.lease_epoch) not in held_dispatches:
            how = "at once with its authorization" if (call_id, refund.lease_epoch) in at_once else "by a claim"
            problems.append(f"{call_id}: executed while paused (dispatched {how} at {dispatch.occurredAt}, "
                            f"paused {paused}, resumed {resumed})")
    for _, call_id in in_flight:
        if not any(d.occurredAt < paused for d in per_call.get(call_id, [])):
            problems.append(f"{call_id}: not dispatched before the pause (the row did not pause mid-dispatch)")
    for _, call_id in held:
        mine = per_call.get(call_id, [])
        after = [d for d in mine if d.occurredAt >= resumed]
        if mine and mine[-1].occurredAt < resumed and (call_id, mine[-1].payload.leaseEpoch) in held_dispatches:
            after.append(mine[-1])  # its last dispatch was held, so it ran after the resume
        if not held_reports.get(call_id):
            problems.append(f"{call_id}: approved while paused, never reported held (tool.call.held)")
        if len(after) != 1:
            problems.append(f"{call_id}: dispatched {len(after)} times after the resume")
    return problems
