"""What a run's page says, pure: its facts in plain words by turn, each tool call on two tracks,
its approvals, budgets, progress and versions — as plain data for `console` to render.

Input: the run's State (as the state topic carries it), its facts (events in log order, with
offsets and times) and who looks. A page holds the newest facts and tool calls; the older ones
are folded behind a boundary (`earlier_facts`, `earlier_calls`: the pages the console fetches
on demand), so a run with thousands of facts paints as fast as a short one. Personal fields
(`"pii": true` in the contract) read `[redacted]` for every role but auditor, and free text
(details, reasons) is left out, as in the views; the idempotency key is for operators (and
auditors) only. Nothing here prints Python's `None`: a missing value is
`NONE_TEXT`.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from runfacts.client.outcomes import Entry
from runfacts.dashboard.auditcheck import AuditStatus
from runfacts.dashboard.retell.story import CALLS_TOLD, STORY_EVENTS, Story, story
from runfacts.ops.views import BUDGET_DIMENSIONS, REVIEW, Viewer
from runfacts.privacy.envelope import ERASED, NO_KEYS, KeyView, is_protected, reveal
from runfacts.privacy.fields import reveal_dict
from runfacts.processors.decider.commands.compensation import stopped
from runfacts.processors.decider.state import TERMINAL, RunState, ToolCallState
from runfacts.processors.policy.display import display_lines, masked
from runfacts.schemas.common import Actor, ArgDisplay, BudgetAmounts, EventBase
from runfacts.schemas.pii import MASK, redact

NONE_TEXT = "—"
FACTS_A_PAGE = 200  # the newest whole turns up to this many facts; older ones one page per request
CALLS_A_PAGE = 20  # the newest tool calls on their tracks; older ones one page per request
EXECUTION_STEPS = ("proposed", "authorized", "dispatching", "accepted", "completed")
VERIFICATION_STEPS = ("not_observed", "pending", "confirmed_success")
OPERATOR_ROLES = frozenset({"operator", "auditor"})
FREE_TEXT = {"run.cancel_requested": ("reason",)}  # free-text fields besides `detail`
_CALL_EVENTS = {
    "tool.call.proposed": "proposed", "tool.call.authorized": "authorized", "tool.call.dispatching": "dispatching",
    "tool.call.accepted": "accepted", "tool.call.completed": "completed", "tool.call.failed": "failed",
    "tool.call.result_unknown": "result_unknown", "tool.call.reconciliation_requested": "reconciling",
    "tool.call.reconciled": "reconciled", "tool.call.retry_requested": "retry_requested",
}


_RESOLVED = {"retry": "try it again", "done_by_hand": "undone by hand",
             "give_up": "give up (the rest stays undone)"}
"""A person's decision about an undo that stopped (`compensation.resolved`), in plain words."""


def text(value: Any) -> str:
    """A value as page text: `NONE_TEXT` for None or empty, never the word None."""
    if value is None or value == "" or value == ():
        return NONE_TEXT
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, datetime):  # with its zone in words: '2026-12-06 10:42:05 UTC'
        return value.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
    return str(value)


@dataclass(frozen=True)
class Fact:
    """One timeline entry."""

    offset: int
    at: datetime
    actor: str
    event_id: str
    event_type: str
    words: str
    number: int = 0  # its place among the run's facts, from 1 (`/runs/{id}?at=<number>`)


@dataclass(frozen=True)
class Turn:
    """Facts of one turn (or between turns: `label` says which)."""

    label: str
    facts: tuple[Fact, ...]


@dataclass(frozen=True)
class Step:
    """One step of a track: what happened, when, and detail (attempt, request id, error)."""

    name: str
    at: datetime
    detail: str = ""


@dataclass(frozen=True)
class CallTracks:
    """A tool call on its two tracks."""

    tool_call_id: str
    capability: str
    action: str
    execution: str
    verification: str
    attempts: int
    idempotency_key: str | None  # None: not shown to this viewer
    external_request_id: str
    error_class: str
    reconciliation: str
    execution_steps: tuple[Step, ...]
    verification_steps: tuple[Step, ...]
    closed_reason: str
    failures: tuple[Failure, ...] = ()  # every failed or lost attempt, oldest first


@dataclass(frozen=True)
class Failure:
    """One attempt that failed (or whose response was lost): when, the error class, whether
    it may be retried, and the provider's words (personal by the contract: auditors read them,
    everyone else reads that they are withheld)."""

    attempt: int
    at: datetime
    kind: str  # "failed" | "result_unknown"
    error_class: str
    retryable: str
    detail: str


@dataclass(frozen=True)
class ApprovalRow:
    """An approval: who was asked, who decided and when, on which arguments, until when."""

    approval_id: str
    tool_call_id: str
    required_role: str
    requested_by: str
    status: str
    decided_by: str
    decided_at: str
    args_hash: str
    expires_at: datetime
    summary: str
    can_reauthorize: bool
    awaits_reauthorization: bool = False  # expired, the run waits: someone must propose the call again
    arguments: tuple[str, ...] = ()  # what the approver is (was) shown; personal values for auditors only
    asked_by: str = NONE_TEXT  # who proposed the call that asks (the approval.required fact's proposedBy)
    why: str = NONE_TEXT  # why a person must decide, in words
    changed: tuple[str, ...] = ()  # what differs from the previous proposal of the same action and target


@dataclass(frozen=True)
class Meter:
    name: str
    used: int
    limit: int
    reserved: int = 0  # held for live child runs (their sub-budgets): `used + reserved` never passes `limit`

    @property
    def fraction(self) -> float:
        return min(1.0, self.used / self.limit) if self.limit > 0 else 0.0


@dataclass(frozen=True)
class ChildRow:
    """A child run under its parent (docs/decisions/0012-child-runs.md): where it stands as the
    parent knows it, its own status when its state is read here, its sub-budget and what it used,
    and its own children (read from its state) beneath it."""

    run_id: str
    status: str  # as its parent knows it: requested, needs_review, completed, failed, cancelled, refused
    run_status: str  # the child's own status (`NONE_TEXT`: its state is not read here)
    reason: str
    reserved: str  # the sub-budget reserved from the parent, in words
    released: bool  # the child ended: its reservation went back (its `used` was charged)
    used: str
    children: tuple[ChildRow, ...] = ()


@dataclass(frozen=True)
class RunPage:
    run_id: str
    version: int
    status: str
    status_reason: str
    status_since: datetime
    tenant: str | None  # None: not shown to this viewer
    goal: str
    needs_review: bool
    turns: tuple[Turn, ...]
    calls: tuple[CallTracks, ...]
    approvals: tuple[ApprovalRow, ...]
    meters: tuple[Meter, ...]
    progress: dict[str, Any] = field(default_factory=dict)
    checkpoint: str = NONE_TEXT
    versions: dict[str, str] = field(default_factory=dict)
    fact_count: int = 0
    audit: AuditStatus | None = None  # None: the audit topic is not read here
    earlier_facts: int = 0  # facts before the first one shown (folded: fetched by `facts_before`)
    facts_before: int | None = None  # the offset of the first fact shown (None: no fact)
    earlier_calls: int = 0  # tool calls proposed before the first one shown
    calls_before: str | None = None  # the first tool call shown (None: no call)
    subject: str = ""  # the run's data subject: "erased", "protected", "plain", "" (no keys held here)
    parent: str | None = None  # the run that started this one (None: a top-level run)
    children: tuple[ChildRow, ...] = ()  # its child runs, each with its own beneath it
    story: Story = Story(())  # the run in plain words (`story.story`), trimmed like the rest
    stopped_undo: str | None = None  # operator: the completed call whose undo stopped the run (compensation.resolve)


@dataclass(frozen=True)
class FactsPage:
    """A page of older facts: its turns, how many facts are older still and the offset to ask
    for them by (the first fact of this page)."""

    turns: tuple[Turn, ...]
    earlier: int
    before: int | None


@dataclass(frozen=True)
class CallsPage:
    """A page of older tool calls, how many are older still and the call to ask for them by."""

    calls: tuple[CallTracks, ...]
    earlier: int
    before: str | None


def _shown(event: EventBase, viewer: Viewer, keys: KeyView = NO_KEYS) -> EventBase:
    """The event as this viewer may read it: auditors all of it, its personal fields revealed
    with the dashboard's keys (plain, or `[erased]`); everyone else without the personal fields
    and without free text (`detail`, a cancel's `reason`), as in the views."""
    if viewer.role == "auditor":
        if not keys.configured:
            return event
        return type(event).model_validate(reveal_dict(event.model_dump(mode="json"), event.eventType, keys))
    hidden = redact(event)
    free = {k: "" for k in FREE_TEXT.get(event.eventType, ("detail",)) if k in type(hidden.payload).model_fields}
    return hidden.model_copy(update={"payload": hidden.payload.model_copy(update=free)}) if free else hidden


SOURCES = {  # who sends the command behind a fact that names no actor (the event type says it)
    **dict.fromkeys(("tool.call.dispatching", "tool.call.accepted", "tool.call.completed", "tool.call.failed",
                     "tool.call.result_unknown", "tool.call.reconciliation_requested", "tool.call.reconciled",
                     "verification.updated"), "dispatcher"),
    **dict.fromkeys(("turn.started", "turn.completed", "reasoning.recorded", "tool.call.proposed",
                     "progress.updated", "run.completed", "budget.debited", "checkpoint.saved"), "agent"),
    **dict.fromkeys(("approval.expired", "memory.expired"), "run decider (timer)"),
}


def actor_words(actor: Actor | None) -> str:
    """`alice (support_agent via dashboard)`; a subject redacted for this viewer reads by its roles."""
    if actor is None:
        return NONE_TEXT
    roles = ", ".join(actor.roles) or "no role"
    return f"{actor.subjectId} ({roles} via {actor.authSource})"


def _named_actor(payload: Any) -> Actor | None:
    actor = getattr(payload, "actor", None) or getattr(payload, "proposedBy", None)
    return actor if isinstance(actor, Actor) else None


def _actor(event: EventBase, caused_by: str | None) -> str:
    """Who caused the fact: the actor it names, else the actor another fact of the same command
    names (`causationId`) or the sender their types imply, else its producer."""
    actor = _named_actor(event.payload)
    if actor is not None:
        return actor_words(actor)
    return caused_by or SOURCES.get(event.eventType, event.producer)


def words(event: EventBase) -> str:
    """One fact in plain words (from an event whose personal fields are already redacted)."""
    p: Any = event.payload
    t, g = event.eventType, getattr
    plain = {
        "run.created": lambda: f"Run created: goal «{g(p, 'goalSummary')}» for {g(p, 'userId')}"
                               + (f" (tenant {p.tenant})" if g(p, "tenant", None) else ""),
        "run.started": lambda: "Run started",
        "run.paused": lambda: f"Run paused: {_code(p.reason)}" + (f" — {p.detail}" if p.detail else ""),
        "run.resumed": lambda: "Run resumed" + (f" after {p.approvalId}" if p.approvalId else ""),
        "run.completed": lambda: "Run completed" + (
            f" ({len(p.pendingVerifications)} verification(s) pending)" if p.pendingVerifications else ""),
        "run.failed": lambda: f"Run failed: {_code(p.errorClass)}" + (f" — {p.detail}" if p.detail else ""),
        "run.cancel_requested": lambda: "Cancel requested" + (f": {p.reason}" if p.reason else ""),
        "run.cancelled": lambda: "Run cancelled",
        "run.needs_review": lambda: f"Needs review: {_code(p.reason)}" + (f" — {p.detail}" if p.detail else ""),
        "run.migrated": lambda: "Run migrated to new versions",
        "run.archived": lambda: "Run archived",
        "compensation.planned": lambda: f"{p.toolCallId} can be undone by {p.compensationCapabilityId}"
                                        if p.problem is None else
                                        f"{p.toolCallId} cannot be undone automatically: {p.problem}",
        "compensation.started": lambda: f"Undoing {p.toolCallId} with {p.compensationToolCallId} "
                                        f"({p.compensationCapabilityId}, {_code(p.reason)})"
                                        + (f"; then {', '.join(p.remaining)}" if p.remaining else ""),
        "compensation.resolved": lambda: f"{p.actor.subjectId} resolved the undo of {p.toolCallId}: "
                                         + _RESOLVED.get(p.decision, p.decision) + (f" — {p.note}" if p.note else ""),
        "run.compensated": lambda: f"Run compensated ({_code(p.reason)}): reversed {', '.join(p.compensatedToolCalls)}",
        "turn.started": lambda: f"Turn {p.turnNumber} started",
        "turn.completed": lambda: f"Turn {p.turnNumber} completed",
        "reasoning.recorded": lambda: f"Reasoning recorded ({len(p.evidenceRefs)} evidence ref(s))",
        "tool.call.proposed": lambda: f"Proposed {p.action} on {p.target} ({p.toolCallId}, risk {p.risk})",
        "tool.call.authorized": lambda: f"{p.toolCallId} authorized"
                                        + (f" by approval {p.approvalId}" if p.approvalId else " (no approval needed)"),
        "tool.call.dispatching": lambda: f"{p.toolCallId} dispatching, attempt {p.attempt} "
                                         f"(request {p.externalRequestId})",
        "tool.call.accepted": lambda: f"{p.toolCallId} accepted by the provider (attempt {p.attempt})",
        "tool.call.completed": lambda: f"{p.toolCallId} completed (attempt {p.attempt}, result {p.resultRef})",
        "tool.call.failed": lambda: f"{p.toolCallId} failed: {_code(p.errorClass)} (attempt {p.attempt}, "
                                    f"{'retryable' if p.retryable else 'not retryable'})"
                                    + (f" — {p.detail}" if p.detail else ""),
        "tool.call.result_unknown": lambda: f"{p.toolCallId}: response lost (attempt {p.attempt}"
                                            + (f", {p.lastError}" if p.lastError else "") + ") — outcome unknown",
        "tool.call.reconciliation_requested": lambda: f"{p.toolCallId}: reconciliation requested for request "
                                                      f"{p.externalRequestId}",
        "tool.call.reconciled": lambda: f"{p.toolCallId} reconciled: {_code(p.outcome)}",
        "tool.call.retry_requested": lambda: f"Retry of {p.toolCallId} requested",
        "verification.updated": lambda: f"{p.toolCallId} verification: {_code(p.status)}"
                                        + (f" (evidence {p.evidenceRef})" if p.evidenceRef else ""),
        "approval.required": lambda: f"Approval {p.approvalId} asked of role {p.requiredRole} for {p.toolCallId}, "
                                     f"expires {text(p.expiresAt)}",
        "approval.granted": lambda: f"Approval {p.approvalId} granted by {actor_words(p.actor)}",
        "approval.rejected": lambda: f"Approval {p.approvalId} rejected by {actor_words(p.actor)}",
        "approval.expired": lambda: f"Approval {p.approvalId} expired (at {text(p.expiresAt)})",
        "approval.consumed": lambda: f"Approval {p.approvalId} used by {p.toolCallId}",
        "approval.invalidated": lambda: f"Approval {p.approvalId} invalidated: {_code(p.reason)}",
        "budget.debited": lambda: "Budget debited: " + (", ".join(
            f"{k} {v}" for k, v in p.amounts.model_dump().items() if v) or "nothing"),
        "budget.exceeded": lambda: f"Budget exceeded: {p.dimension} {p.used} of {p.limit}",
        "checkpoint.saved": lambda: f"Checkpoint saved at node {p.node}",
        "progress.updated": lambda: f"Progress: next safe action {p.nextSafeAction}",
        "feedback.recorded": lambda: f"Feedback recorded: rating {p.rating}",
        "grant.revoked": lambda: f"Grant of {p.toolCallId} revoked ({p.grantKind}): {_code(p.reason)}",
        "checkpoint.archived": lambda: f"Checkpoints archived: {_code(p.reason)}",
        "memory.proposed": lambda: f"Memory {p.memoryId} proposed for {p.scopeKind} {p.scopeId} "
                                   f"({len(p.evidence)} evidence fact(s), expires {text(p.expiresAt)})",
        "memory.confirmed": lambda: f"Memory {p.memoryId} confirmed by {p.actor.subjectId}",
        "memory.rejected": lambda: f"Memory {p.memoryId} rejected by {p.actor.subjectId}",
        "memory.revoked": lambda: f"Memory {p.memoryId} revoked by {p.actor.subjectId}",
        "memory.expired": lambda: f"Memory {p.memoryId} expired (at {text(p.expiresAt)})",
        "command.rejected": lambda: f"Command {p.commandType} rejected: {_code(p.reasonCode)}"
                                    + (f" — {p.detail}" if p.detail else ""),
        "child.requested": lambda: f"Started child run {p.childRunId} with budget {amounts(p.budget)}",
        "run.parent_linked": lambda: f"Started as a child of run {p.parentRunId}",
        "child.reported": lambda: _child_reported(p),
        "evidence.appended": lambda: f"Evidence {p.item.evidenceId} appended (hash {_short(p.item.hash)})",
        "evidence.merged": lambda: f"Merged {len(p.items)} evidence item(s) from child {p.childRunId}" + (
            f"; {len(p.overflow)} not merged, the ledger is full ({', '.join(p.overflow)}): needs review"
            if p.overflow else ""),
        "evidence.conflict_detected": lambda: f"Evidence {p.evidenceId} conflicts: {p.offeredBy} offers hash "
                                              f"{_short(p.offeredHash)}, {p.heldBy} holds {_short(p.heldHash)}; "
                                              "nothing overwritten, needs review",
        "tool.call.held": lambda: f"Waiting: {event.capabilityId or 'its capability'} paused by {p.pausedBy}"
                                  + (f": {p.reason}" if p.reason else "") + f" ({p.toolCallId} held)",
        "tool.paused": lambda: f"{event.capabilityId} paused by {actor_words(p.actor)}"
                               + (f": {p.reason}" if p.reason else ""),
        "tool.resumed": lambda: f"{event.capabilityId} resumed by {actor_words(p.actor)}"
                                + (f": {p.reason}" if p.reason else ""),
        "version.drained": lambda: f"{'Drain undone' if p.undo else 'New runs stopped'} on {p.dimension} "
                                   f"{p.version} by {actor_words(p.actor)}" + (f": {p.reason}" if p.reason else ""),
        "subject.erased": lambda: f"Data subject's keys erased by {actor_words(p.actor)}",
    }
    say = plain.get(t)
    return say() if say is not None else t


def _code(code: Any) -> str:
    return str(code).replace("_", " ")


def _child_reported(p: Any) -> str:
    """'Child run-x completed; used 3 steps; released 7 steps, 2 tool calls' (or its review)."""
    if p.status == "needs_review":
        return f"Child {p.childRunId} needs review" + (f": {_code(p.reason)}" if p.reason else "")
    return (f"Child {p.childRunId} {_code(p.status)}" + (f" ({_code(p.reason)})" if p.reason else "")
            + f"; used {amounts(p.used)}; released {amounts(p.released)}")


AMOUNT_WORDS = {"steps": ("step", "steps"), "toolCalls": ("tool call", "tool calls"), "tokens": ("token", "tokens"),
                "wallTimeMs": ("ms wall time", "ms wall time"), "costMicros": ("µ cost", "µ cost")}


def amounts(budget: BudgetAmounts) -> str:
    """Budget amounts in words, the zero ones left out: '10 steps, 1 tool call'; 'nothing'."""
    said = [f"{v} {AMOUNT_WORDS.get(k, (k, k))[v != 1]}" for k, v in budget.model_dump().items() if v]
    return ", ".join(said) or "nothing"


def _short(digest: str) -> str:
    """A hash as a person compares it: its first characters ('sha256:1a2b3c4d5e6f…')."""
    return digest if len(digest) <= 19 else digest[:19] + "…"


TREE_DEPTH = 8  # child runs below a page's run shown at most this deep (a deeper one: its own page)


def child_tree(state: RunState, lookup: Callable[[str], RunState | None] | None = None,
               depth: int = TREE_DEPTH, seen: frozenset[str] = frozenset()) -> tuple[ChildRow, ...]:
    """The run's child runs (`RunState.children`, in the order they were asked for), each with its
    own children beneath it when `lookup` reads its state (a run this viewer may see, else None):
    without it, one level. What a live child used is its own state's, when read; an ended child's
    is what it reported."""
    seen = seen | {state.runId}
    rows = []
    for child in state.children.values():
        own = lookup(child.childRunId) if lookup is not None else None
        used = own.budget.used if own is not None and child.live else child.used
        below = (child_tree(own, lookup, depth - 1, seen)
                 if own is not None and depth > 1 and child.childRunId not in seen else ())
        rows.append(ChildRow(child.childRunId, child.status, own.status if own is not None else NONE_TEXT,
                             text(child.reason), amounts(child.reserved), not child.live, amounts(used), below))
    return tuple(rows)


Span = tuple[str, int, int]  # a turn's label and the indexes [start, end) of its facts


def spans(entries: Sequence[Entry]) -> list[Span]:
    """The facts' turns, in log order (facts outside a turn in their own groups): labels and
    index ranges, without redacting or wording a fact."""
    found: list[Span] = []
    label: str | None = None
    start, group = 0, "Before the first turn"
    for i, entry in enumerate(entries):
        new_label = label
        if entry.event_type == "turn.started":
            payload: Any = entry.event.payload
            new_label = f"Turn {payload.turnNumber}"
        if new_label != label and i > start:
            found.append((group, start, i))
            start = i
        label = new_label
        if i == start:
            group = label or ("Between turns" if found else "Before the first turn")
        if entry.event_type == "turn.completed":
            found.append((group, start, i + 1))
            start, label = i + 1, None
    if start < len(entries):
        found.append((group, start, len(entries)))
    return found


def page_start(turns: Sequence[Span], end: int, limit: int = FACTS_A_PAGE) -> int:
    """Where the page of facts ending before index `end` starts: the newest whole turns that fit
    in `limit` facts; a turn that does not fit is cut (its newer part on this page) only when
    the page would otherwise hold under half of `limit`."""
    start = end
    for _label, first, _last in reversed(turns):
        if first >= end:
            continue
        if end - first <= limit:
            start = first
            continue
        if end - start < limit // 2:
            start = end - limit
        break
    return start


def timeline(entries: Sequence[Entry], viewer: Viewer, start: int = 0, end: int | None = None,
             turns: Sequence[Span] | None = None, keys: KeyView = NO_KEYS) -> tuple[Turn, ...]:
    """The facts [start, end) grouped by turn, in log order; a turn cut at `start` reads
    '… (continued)'. Each fact's actor is who caused it (`_actor`)."""
    end = len(entries) if end is None else end
    shown = {i: _shown(entries[i].event, viewer, keys) for i in range(start, end)}
    causes: dict[str, str] = {}  # the facts of one command sit together: any of them may name its actor
    for i in range(start, end):
        actor, cause = _named_actor(shown[i].payload), entries[i].causation_id
        if actor is not None and cause is not None:
            causes[cause] = actor_words(actor)
    for i in range(start, end):  # else the sender the first fact's type implies
        cause, source = entries[i].causation_id, SOURCES.get(entries[i].event_type)
        if cause is not None and source is not None:
            causes.setdefault(cause, source)
    groups = []
    for label, first, last in spans(entries) if turns is None else turns:
        lo, hi = max(first, start), min(last, end)
        if lo >= hi:
            continue
        facts = []
        for i in range(lo, hi):
            event = shown[i]
            caused_by = causes.get(entries[i].causation_id or "")
            facts.append(Fact(entries[i].offset, event.occurredAt, _actor(event, caused_by), event.eventId,
                              event.eventType, words(event), i + 1))
        groups.append(Turn(label if lo == first else f"{label} (continued)", tuple(facts)))
    return tuple(groups)


def earlier_facts(entries: Sequence[Entry], viewer: Viewer, before: int, keys: KeyView = NO_KEYS) -> FactsPage:
    """The page of facts just before offset `before` (a boundary a page gave out)."""
    end = _index_of(entries, before)
    turns = spans(entries)
    start = page_start(turns, end)
    return FactsPage(timeline(entries, viewer, start, end, turns, keys), start,
                     entries[start].offset if start < end else None)


def earlier_calls(state: RunState, entries: Sequence[Entry], viewer: Viewer, before: str,
                  keys: KeyView = NO_KEYS) -> CallsPage:
    """The page of tool calls proposed just before call `before` (a boundary a page gave out);
    an unknown call id: the newest page."""
    ids = list(state.toolCalls)
    end = ids.index(before) if before in ids else len(ids)
    start = max(0, end - CALLS_A_PAGE)
    return CallsPage(_call_tracks(state, entries, viewer, ids[start:end], keys), start,
                     ids[start] if start < end else None)


def _index_of(entries: Sequence[Entry], offset: int) -> int:
    """The index of the first fact at or after log offset `offset`."""
    return bisect_left([e.offset for e in entries], offset)


def _call_tracks(state: RunState, entries: Sequence[Entry], viewer: Viewer,
                 calls: Sequence[str], keys: KeyView = NO_KEYS) -> tuple[CallTracks, ...]:
    """The two tracks of each tool call of `calls`, in that order, with its failed attempts."""
    steps, failures = _steps(entries, calls, viewer, keys)
    return tuple(_tracks(state.toolCalls[c], steps.get(c, ([], [])), viewer, tuple(failures.get(c, ())))
                 for c in calls)


WITHHELD = "[withheld: personal by the contract, auditors read it]"


def _steps(entries: Sequence[Entry], calls: Sequence[str], viewer: Viewer, keys: KeyView = NO_KEYS,
           ) -> tuple[dict[str, tuple[list[Step], list[Step]]], dict[str, list[Failure]]]:
    """Per tool call of `calls`: its execution and verification steps from the facts, and its
    failed (or lost) attempts with the error's words as this viewer may read them."""
    found: dict[str, tuple[list[Step], list[Step]]] = {}
    failures: dict[str, list[Failure]] = {}
    wanted = set(calls)
    for entry in entries:
        call, kind = entry.tool_call_id, entry.event_type
        if call not in wanted or (kind not in _CALL_EVENTS and kind != "verification.updated"):
            continue
        event = entry.event
        p: Any = event.payload
        execution, verification = found.setdefault(call, ([], []))
        if kind == "verification.updated":
            verification.append(Step(p.status, event.occurredAt,
                                     f"evidence {p.evidenceRef}" if p.evidenceRef else ""))
            continue
        detail = []
        if getattr(p, "attempt", None) is not None:
            detail.append(f"attempt {p.attempt}")
        if getattr(p, "externalRequestId", None):
            detail.append(f"request {p.externalRequestId}")
        if kind == "tool.call.failed":
            detail.append(f"error {p.errorClass}")
        if kind == "tool.call.reconciled":
            detail.append(f"outcome {p.outcome}")
        execution.append(Step(_CALL_EVENTS[kind], event.occurredAt, ", ".join(detail)))
        if kind in ("tool.call.failed", "tool.call.result_unknown"):
            failures.setdefault(call, []).append(_failure(event, viewer, keys))
    return found, failures


def _failure(event: EventBase, viewer: Viewer, keys: KeyView) -> Failure:
    p: Any = event.payload
    said = p.detail if event.eventType == "tool.call.failed" else p.lastError
    if said and viewer.role == "auditor":
        said = str(reveal(said, "detail" if event.eventType == "tool.call.failed" else "lastError", keys))
    elif said:
        said = WITHHELD
    if event.eventType == "tool.call.failed":
        retry = ("yes" + (f", after {p.retryAfterMs} ms" if p.retryAfterMs else "")) if p.retryable else "no"
        return Failure(p.attempt, event.occurredAt, "failed", p.errorClass, retry, text(said))
    return Failure(p.attempt, event.occurredAt, "result_unknown", "response lost", "reconciled first",
                   text(said))


def _tracks(call: ToolCallState, steps: tuple[list[Step], list[Step]], viewer: Viewer,
            failures: tuple[Failure, ...] = ()) -> CallTracks:
    execution, verification = steps
    if not execution:  # facts compacted away or not read yet: the State's own times
        execution = [Step("proposed", call.proposedAt)]
    return CallTracks(
        call.toolCallId, call.capabilityId, call.action, call.execution, call.verification, call.attempts,
        call.idempotencyKey if viewer.role in OPERATOR_ROLES else None, text(call.externalRequestId),
        text(call.errorClass), call.reconciliation, tuple(execution), tuple(verification), text(call.closedReason),
        failures)


def may_reauthorize(state: RunState, approval_id: str, viewer: Viewer) -> bool:
    """An expired approval awaiting re-authorization whose call this viewer may propose again
    (the policy's `tool.call.propose` rule)."""
    return awaits_reauthorization(state, approval_id) and viewer.may("tool.call.propose", frozenset())


def awaits_reauthorization(state: RunState, approval_id: str) -> bool:
    """An expired approval whose call can be proposed again while the run waits for it, and no
    newer approval of the same arguments is open."""
    approval = state.approvals.get(approval_id)
    if approval is None or approval.status != "expired" or state.status in TERMINAL:
        return False
    if not (state.status == "running" or (state.status == "waiting_for_review"
                                          and state.statusReason == "approval_expired")):
        return False
    if any(a.status == "open" and a.argsHash == approval.argsHash for a in state.approvals.values()):
        return False
    return approval.toolCallId in state.toolCalls


def _arguments(state: RunState, tool_call_id: str, auditor: bool, keys: KeyView = NO_KEYS) -> tuple[str, ...]:
    """The lines of the call's argument display (personal values masked unless auditor, who
    reads them revealed)."""
    call = state.toolCalls.get(tool_call_id)
    if call is None or call.display is None:
        return ()
    return tuple(display_lines(_revealed_display(call.display, keys) if auditor else masked(call.display)))


def _revealed_display(display: ArgDisplay, keys: KeyView) -> ArgDisplay:
    if not keys.configured:
        return display
    return display.model_copy(update={"fields": tuple(
        f.model_copy(update={"personalValue": str(reveal(f.personalValue, "personalValue", keys))})
        if f.personalValue is not None else f for f in display.fields)})


def why_asked(risk: str, required_role: str, capability: str) -> str:
    """Why a person decides, in words."""
    return f"{capability} at {risk} risk needs a {required_role.replace('_', ' ')}'s approval"


def changed_since(state: RunState, tool_call_id: str, auditor: bool, keys: KeyView = NO_KEYS) -> tuple[str, ...]:
    """What the call's arguments change from the previous proposal of the same action on the
    same target in this run (its display lines that differ); () when there is none."""
    call = state.toolCalls.get(tool_call_id)
    if call is None or call.display is None:
        return ()
    ids = list(state.toolCalls)
    earlier = [state.toolCalls[c] for c in ids[:ids.index(tool_call_id)]]
    before = next((c for c in reversed(earlier) if c.action == call.action and c.target == call.target
                   and c.display is not None), None)
    if before is None or before.display is None:
        return ()
    now, then = _arguments(state, tool_call_id, auditor, keys), _arguments(state, before.toolCallId, auditor, keys)
    names = lambda lines: {line.split(" = ", 1)[0]: line for line in lines}  # noqa: E731
    old, new = names(then), names(now)
    out = [f"{new[n]} (was {old[n].split(' = ', 1)[1]})" if n in old else f"{new[n]} (new)"
           for n in new if old.get(n) != new[n]]
    out += [f"{n} removed" for n in old if n not in new]
    return tuple(out) or (f"same arguments as {before.toolCallId}",)


def proposers(entries: Sequence[Entry], viewer: Viewer, keys: KeyView = NO_KEYS) -> dict[str, str]:
    """Per approval: who proposed the call that asks it (the approval.required fact's
    proposedBy), as this viewer may read it."""
    found = {}
    for entry in entries:
        if entry.event_type == "approval.required":
            event = _shown(entry.event, viewer, keys)
            p: Any = event.payload
            found[p.approvalId] = actor_words(p.proposedBy)
    return found


def _person(value: str | None, field: str, keys: KeyView) -> str:
    return NONE_TEXT if not value else str(reveal(value, field, keys))


def subject_status(state: RunState, keys: KeyView) -> str:
    """Whether the run's data subject was erased (its keys gone: personal fields read `[erased]`),
    is protected (sealed and pseudonymised, readable with the keys), or was recorded in plain;
    "" when this dashboard holds no keys."""
    if not keys.configured:
        return ""
    if not is_protected(state.userId):
        return "plain"
    return "erased" if reveal(state.userId, "userId", keys) == ERASED else "protected"


def run_page(state: RunState, entries: Sequence[Entry], viewer: Viewer, audit: AuditStatus | None = None,
             facts_from: int | None = None, calls_from: str | None = None, keys: KeyView = NO_KEYS,
             lookup: Callable[[str], RunState | None] | None = None) -> RunPage:
    """The run page's content for this viewer (who may see the run: checked by the caller): the
    newest page of facts and of tool calls, or everything from `facts_from` (an offset) and
    `calls_from` (a tool call) on, as a page that has unfolded older ones asks. An auditor reads
    the personal fields revealed with `keys` (`[erased]` once the subject's keys are gone).
    `lookup` reads another run's state (None when this viewer may not see it): the child runs'
    own statuses and children (`child_tree`)."""
    auditor = viewer.role == "auditor"
    turns = spans(entries)
    start = page_start(turns, len(entries)) if facts_from is None else _index_of(entries, facts_from)
    ids = list(state.toolCalls)
    first_call = ids.index(calls_from) if calls_from in ids else max(0, len(ids) - CALLS_A_PAGE)
    calls = _call_tracks(state, entries, viewer, ids[first_call:], keys)
    asked = proposers(entries, viewer, keys)
    approvals = tuple(
        ApprovalRow(a.approvalId, a.toolCallId, a.requiredRole,
                    ", ".join(_person(r, "userId", keys) for r in a.requesters) if auditor else MASK, a.status,
                    (_person(a.decidedBy, "subjectId", keys) if auditor else MASK) if a.decidedBy else NONE_TEXT,
                    text(a.decidedAt), a.argsHash, a.expiresAt,
                    _person(a.summary, "summary", keys) if auditor else MASK,
                    may_reauthorize(state, a.approvalId, viewer), awaits_reauthorization(state, a.approvalId),
                    _arguments(state, a.toolCallId, auditor, keys), asked.get(a.approvalId, NONE_TEXT),
                    why_asked(a.risk, a.requiredRole, state.toolCalls[a.toolCallId].capabilityId
                              if a.toolCallId in state.toolCalls else a.toolCallId),
                    changed_since(state, a.toolCallId, auditor, keys))
        for a in sorted(state.approvals.values(), key=lambda a: a.expiresAt))
    limits, used = state.budget.limits.model_dump(), state.budget.used.model_dump()
    held = state.budget.reserved.model_dump()
    meters = tuple(Meter(d, used[d], limits[d], held[d]) for d in BUDGET_DIMENSIONS if limits[d] > 0 or used[d] > 0)
    cp = state.checkpoint
    return RunPage(
        run_id=state.runId, version=state.version, status=state.status, status_reason=text(state.statusReason),
        status_since=state.statusSince, tenant=state.tenant if viewer.role in OPERATOR_ROLES else None,
        goal=_person(state.goalSummary, "goalSummary", keys) if auditor else MASK,
        needs_review=state.status in REVIEW, turns=timeline(entries, viewer, start, len(entries), turns, keys),
        calls=calls, approvals=approvals, meters=meters, subject=subject_status(state, keys),
        progress={"verified": list(state.progress.verifiedItems), "open": list(state.progress.openItems),
                  "next": text(state.progress.nextSafeAction)},
        checkpoint=f"node {cp.node}, saved {text(cp.savedAt)}" if cp else NONE_TEXT,
        versions={k: text(v) for k, v in state.versions.model_dump().items()}, fact_count=len(entries),
        audit=audit, earlier_facts=start, facts_before=entries[start].offset if start < len(entries) else None,
        earlier_calls=first_call, calls_before=ids[first_call] if first_call < len(ids) else None,
        parent=state.parentRunId, children=child_tree(state, lookup), story=run_story(entries, viewer, keys),
        stopped_undo=_stopped_undo(state, viewer))


def run_story(entries: Sequence[Entry], viewer: Viewer, keys: KeyView = NO_KEYS,
              calls_told: int = CALLS_TOLD) -> Story:
    """The run's story as this viewer may read it: only the facts a story reads are decoded,
    and of the tool calls only the newest `calls_told` (the others are counted by their
    proposals), so a run of thousands of facts tells it as fast as a short one."""
    proposed = [e.tool_call_id for e in entries if e.event_type == "tool.call.proposed"]
    told = set(proposed[-calls_told:]) if calls_told else set()
    events = [_shown(e.event, viewer, keys) for e in entries if e.event_type in STORY_EVENTS
              and (e.tool_call_id is None or e.tool_call_id in told)]
    return story(events, viewer.role == "auditor", calls_told, len(proposed) - len(told))


def _stopped_undo(state: RunState, viewer: Viewer) -> str | None:
    """For an operator (the role of `compensation.resolve`): the call whose undo stopped the run."""
    if viewer.role != "operator":
        return None
    plan = stopped(state)
    return None if plan is None else plan.toolCallId


def relative(then: datetime, now: datetime) -> str:
    """'12 s ago', '5 min ago', '3 h ago', '2 d ago' ('in 4 min' for the future)."""
    delta = now - then
    future = delta < timedelta(0)
    seconds = abs(delta.total_seconds())
    for unit, size in (("d", 86400), ("h", 3600), ("min", 60)):
        if seconds >= size:
            amount = f"{int(seconds // size)} {unit}"
            break
    else:
        amount = f"{int(seconds)} s"
    return f"in {amount}" if future else f"{amount} ago"
