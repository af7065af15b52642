"""Child runs and the evidence ledger: decide handlers and the cross-run outbox (pure).

docs/decisions/0012-child-runs.md has the protocol. The handlers decide on one run's state
only; `outbox(command, before, events, after)` derives the commands this run owes another run
from the facts just decided (a child to create, a report to a parent, a cancellation to a
child). The shell sends them in the same transaction as the facts, so they exist exactly when
the facts do, with ids derived from the facts' ids (a redelivery re-derives the same ids and the
receiving run's dedupe window drops the copy).
"""

from __future__ import annotations

from runfacts.processors.decider.context import DecideContext, Draft, Handler, Rejected, draft
from runfacts.processors.decider.state import EVIDENCE_MAX, ChildState, RunState
from runfacts.schemas import commands as cmd
from runfacts.schemas import events as ev
from runfacts.schemas.common import Actor, BudgetAmounts, CommandBase, EventBase, EvidenceItem

XRUN_SOURCE = "decider-xrun"
XRUN_ACTOR = Actor(subjectId="run-decider", roles=("decider",), authSource=XRUN_SOURCE)
"""Who sends cross-run commands: the decider of the sending run (policy: role `decider`)."""
POOLS = ("steps", "toolCalls", "tokens", "costMicros")
"""Budget dimensions reserved from the parent and charged back (wall time is capped, not pooled)."""
ENDED = frozenset({"completed", "failed", "cancelled", "refused"})
EVIDENCE_CHUNK_BYTES = 24 * 1024
"""The most text an evidence part carries (its items' ids, hashes, refs and authors, UTF-8): with
the envelope and the encoding well under the intake's 64 KiB record limit (`InputLimits`). A single
item is bounded by the `evidence.append` that brought it, so a part holds at least one."""


def remaining(state: RunState, field: str) -> int | None:
    """What is left of a pooled dimension (None: unlimited)."""
    b = state.budget
    limit = getattr(b.limits, field)
    return None if limit <= 0 else limit - getattr(b.used, field) - getattr(b.reserved, field)


def start_child(c: cmd.StartChildRun, state: RunState, ctx: DecideContext) -> list[Draft]:
    """Reserve a sub-budget and ask for the child (never more than the parent has left)."""
    p = c.payload
    if state.status != "running":
        raise Rejected(c, "run_not_active", f"run is {state.status}")
    if p.childRunId == state.runId or p.childRunId in state.children:
        raise Rejected(c, "child_exists", f"{p.childRunId} is already this run or one of its children")
    for field in POOLS:
        left, want = remaining(state, field), getattr(p.budget, field)
        if left is None:
            continue
        if want <= 0:
            raise Rejected(c, "budget_unbounded", f"{field}: the parent limits it, give the child a limit of 1..{left}")
        if want > left:
            raise Rejected(c, "budget_exceeded", f"{field}: {want} asked > {left} left")
    _check_wall_time(c, state)
    return [draft(ev.ChildRunRequested, childRunId=p.childRunId, goalRef=p.goalRef, budget=p.budget)]


def _check_wall_time(c: cmd.StartChildRun, state: RunState) -> None:
    limit, want = state.budget.limits.wallTimeMs, c.payload.budget.wallTimeMs
    if limit <= 0:
        return
    left = limit - int((c.issuedAt - state.createdAt).total_seconds() * 1000)
    if want <= 0 or want > left:
        raise Rejected(c, "budget_exceeded" if want > 0 else "budget_unbounded",
                       f"wallTimeMs: the child may run at most the parent's {max(left, 0)} ms left")


def create_child(c: cmd.CreateChildRun, ctx: DecideContext) -> list[Draft]:
    """The child's first facts: created on the parent's versions, for the parent's people."""
    p = c.payload
    if p.versions != ctx.current_versions:
        raise Rejected(c, "incompatible_versions", "the parent's versions are not the runtime's")
    return [
        draft(ev.RunCreated, goalRef=p.goalRef, goalSummary=p.goalSummary, userId=p.userId,
              tenant=p.tenant, budget=p.budget, versions=p.versions, actor=p.creator),
        draft(ev.RunStarted, versions=p.versions),
        draft(ev.ParentLinked, parentRunId=p.parentRunId),
    ]


def append_evidence(c: cmd.AppendEvidence, state: RunState, ctx: DecideContext) -> list[Draft]:
    """Append under this run's own id; an id is never written twice."""
    p = c.payload
    if state.terminal or state.status == "cancelling":
        raise Rejected(c, "run_ended", f"run is {state.status}")
    held = state.evidenceItems.get(p.evidenceId)
    if held is not None:
        same = "the same hash" if held.hash == p.hash else f"hash {held.hash[:24]}"
        raise Rejected(c, "evidence_exists", f"{p.evidenceId} is held with {same} (by {held.by}): "
                       "evidence is append-only, give new evidence a new id")
    if len(state.evidenceItems) >= EVIDENCE_MAX:
        raise Rejected(c, "evidence_full", f"the ledger holds {EVIDENCE_MAX} items: start a child run for more")
    item = EvidenceItem(evidenceId=p.evidenceId, hash=p.hash, ref=p.ref, by=state.runId)
    return [draft(ev.EvidenceAppended, item=item)]


def report_child(c: cmd.ReportChildRun, state: RunState, ctx: DecideContext) -> list[Draft]:
    """A child's news: its review surfaces here; its end releases its reservation and merges its evidence."""
    p = c.payload
    child = state.children.get(p.childRunId)
    if child is None:
        raise Rejected(c, "unknown_child", f"{p.childRunId} is no child of {state.runId}")
    if not child.live:
        raise Rejected(c, "child_ended", f"{p.childRunId} already reported {child.status}")
    if p.status == "requested":
        raise Rejected(c, "invalid_report", "a child reports needs_review or its end")
    zero = BudgetAmounts()
    if p.status == "needs_review":
        return [draft(ev.ChildRunReported, childRunId=p.childRunId, status=p.status, reason=p.reason,
                      used=zero, released=zero)]
    used = _capped(p.used, child.reserved)
    drafts = [draft(ev.ChildRunReported, childRunId=p.childRunId, status=p.status, reason=p.reason,
                    used=used, released=_minus(child.reserved, used))]
    return drafts + merge(state, p.childRunId, p.evidence)


def report_evidence(c: cmd.ReportChildEvidence, state: RunState, ctx: DecideContext) -> list[Draft]:
    """A part of a child's evidence, merged as its end report's would be (`merge`): idempotent (an
    item equal to the held one merges again, a redelivered part is dropped by its id), a conflict a
    fact and needs_review, never an overwrite. Parts come before the end report, in order."""
    p = c.payload
    if p.childRunId not in state.children:
        raise Rejected(c, "unknown_child", f"{p.childRunId} is no child of {state.runId}")
    if not p.evidence or not 0 <= p.chunk < p.chunks:
        raise Rejected(c, "invalid_report", f"part {p.chunk} of {p.chunks} with {len(p.evidence)} item(s)")
    return merge(state, p.childRunId, p.evidence)


def merge(state: RunState, child_id: str, offered: tuple[EvidenceItem, ...]) -> list[Draft]:
    """Items new to the ledger or equal to it are merged; an id held with another hash is a
    conflict fact (the held item stays); items past the ledger's size are named as overflow."""
    ledger = dict(state.evidenceItems)
    merged, overflow, conflicts = [], [], []
    for item in offered:
        held = ledger.get(item.evidenceId)
        if held is not None and held.hash != item.hash:
            conflicts.append(draft(ev.EvidenceConflictDetected, childRunId=child_id, evidenceId=item.evidenceId,
                                   heldHash=held.hash, heldBy=held.by, offeredHash=item.hash, offeredBy=item.by))
        elif held is not None:
            merged.append(held)
        elif len(ledger) >= EVIDENCE_MAX:
            overflow.append(item.evidenceId)
        else:
            ledger[item.evidenceId] = item
            merged.append(item)
    drafts = []
    if merged or overflow:
        drafts.append(draft(ev.EvidenceMerged, childRunId=child_id, items=merged, overflow=overflow))
    return drafts + conflicts


def _capped(used: BudgetAmounts, reserved: BudgetAmounts) -> BudgetAmounts:
    """What a report charges: at most the reservation in a limited (reserved) dimension."""
    return BudgetAmounts(**{f: min(getattr(used, f), getattr(reserved, f)) if getattr(reserved, f) > 0
                            else max(getattr(used, f), 0) for f in POOLS})


def _minus(a: BudgetAmounts, b: BudgetAmounts) -> BudgetAmounts:
    return BudgetAmounts(**{f: max(getattr(a, f) - getattr(b, f), 0) for f in POOLS})


HANDLERS: dict[str, Handler] = {
    "child.start": start_child,
    "child.report": report_child,
    "child.report_evidence": report_evidence,
    "evidence.append": append_evidence,
}
"""The child-run commands on an existing run (`run.create_child` needs none: core decides it)."""


# --- the outbox: cross-run commands derived from the facts just decided -----------------------

def outbox(command: CommandBase, before: RunState | None, events: list[EventBase],
           after: RunState | None) -> list[CommandBase]:
    """The commands this run owes other runs after `events` (decided from `command` on `before`)."""
    if not events:
        return []
    out: list[CommandBase] = []
    if isinstance(command, cmd.CreateChildRun) and isinstance(events[0], ev.CommandRejected):
        r = events[0].payload
        out.append(_report(command.payload.parentRunId, command.runId, events[-1], "refused",
                           f"{r.reasonCode}: {r.detail}"[:512]))
    if after is None:
        return out
    out += [_create(command, e, after) for e in events if isinstance(e, ev.ChildRunRequested)]
    was = before.status if before is not None else None
    news = after.status != was and (after.status == "needs_review" or after.terminal)
    if after.parentRunId is not None and news:
        out += _reports(after.parentRunId, after.runId, events[-1], after.status, after.statusReason or "", after)
    if after.status != was and (after.status == "cancelling" or after.status == "failed"):
        out += [_cancel(child, events[-1], after) for child in after.live_children()]
    return out


def _id(event: EventBase, suffix: str = "") -> str:
    return f"xrun:{event.eventId}{suffix}"


def _envelope(run_id: str, event: EventBase, suffix: str = "") -> dict[str, object]:
    return {"commandId": _id(event, suffix), "runId": run_id, "actor": XRUN_ACTOR,
            "issuedAt": event.occurredAt, "correlationId": event.correlationId, "causationId": event.eventId}


def _create(command: CommandBase, e: ev.ChildRunRequested, parent: RunState) -> cmd.CreateChildRun:
    p = e.payload
    summary = command.payload.goalSummary if isinstance(command, cmd.StartChildRun) else p.goalRef
    return cmd.CreateChildRun(**_envelope(p.childRunId, e), payload=cmd.CreateChildRunPayload(  # type: ignore[arg-type]
        parentRunId=parent.runId, goalRef=p.goalRef, goalSummary=summary, userId=parent.userId,
        tenant=parent.tenant, budget=p.budget, versions=parent.versions, creator=parent.createdBy))


def _report(parent_id: str, child_id: str, last: EventBase, status: str, reason: str,
            child: RunState | None = None) -> cmd.ReportChildRun:
    ended = child is not None and child.terminal
    return cmd.ReportChildRun(**_envelope(parent_id, last, ":report"), payload=cmd.ReportChildRunPayload(  # type: ignore[arg-type]
        childRunId=child_id, status=status, reason=reason,  # type: ignore[arg-type]
        used=child.budget.used if ended and child is not None else BudgetAmounts(),
        evidence=tuple(child.evidenceItems.values()) if ended and child is not None else ()))


def evidence_chunks(items: tuple[EvidenceItem, ...], budget: int = EVIDENCE_CHUNK_BYTES) -> list[list[EvidenceItem]]:
    """`items` in order, in parts of at most `budget` bytes of text each (at least one item a part)."""
    parts: list[list[EvidenceItem]] = [[]]
    size = 0
    for item in items:
        n = sum(len(v.encode()) + 8 for v in (item.evidenceId, item.hash, item.ref, item.by))
        if parts[-1] and size + n > budget:
            parts.append([])
            size = 0
        parts[-1].append(item)
        size += n
    return parts if parts[0] else []


def _reports(parent_id: str, child_id: str, last: EventBase, status: str, reason: str,
             child: RunState) -> list[CommandBase]:
    """The child's report; when its ended ledger does not fit in one part, the parts first
    (`child.report_evidence`, ids `xrun:<event>:evidence:<n>`) and the report without evidence."""
    report = _report(parent_id, child_id, last, status, reason, child)
    parts = evidence_chunks(report.payload.evidence)
    if len(parts) <= 1:
        return [report]
    sent: list[CommandBase] = [
        cmd.ReportChildEvidence(**_envelope(parent_id, last, f":evidence:{n}"),  # type: ignore[arg-type]
                                payload=cmd.ReportChildEvidencePayload(childRunId=child_id, chunk=n, chunks=len(parts),
                                                                       evidence=tuple(part)))
        for n, part in enumerate(parts)]
    return [*sent, report.model_copy(update={"payload": report.payload.model_copy(update={"evidence": ()})})]


def _cancel(child: ChildState, last: EventBase, parent: RunState) -> cmd.CancelRun:
    return cmd.CancelRun(**_envelope(child.childRunId, last, f":cancel:{child.childRunId}"),  # type: ignore[arg-type]
                         payload=cmd.CancelRunPayload(reason=f"parent_cancelled: {parent.runId}"))

