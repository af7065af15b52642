"""A run's story in one paragraph, pure: "Refund 59.90 EUR for order-5001 proposed by
refund-agent, approved by bob at 10:42 UTC, sent, response lost, found completed at the
provider, settled. Run completed."

Input: the run's facts as the viewer may read them (`runpage._shown`: personal fields revealed
for auditors, `[redacted]` for everyone else) and whether the viewer is an auditor; output:
the run page's header. No clock, no I/O: the same facts tell the same story.

What a call is: an auditor reads its summary ("Refund 59.90 EUR for order-5001"); any other role
reads its action, target and the arguments its display shows to them (personal ones left out).
Who acted: a person's or agent's name when the viewer may read it, else their role in words
("approved by a support agent"). Only the newest `CALLS_TOLD` tool calls are told; the story
says how many earlier ones it leaves out.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from runfacts.processors.policy.display import display_lines, masked
from runfacts.schemas.common import Actor, EventBase
from runfacts.schemas.pii import MASK

CALLS_TOLD = 5  # the newest tool calls the story tells; older ones are counted
STORY_EVENTS = frozenset({
    "run.created", "run.parent_linked", "run.paused", "run.resumed", "run.completed", "run.failed",
    "run.cancel_requested", "run.cancelled", "run.needs_review", "run.compensated", "child.requested",
    "child.reported", "compensation.started", "approval.required", "approval.granted", "approval.rejected",
    "approval.expired", "approval.invalidated", "tool.call.proposed", "tool.call.dispatching",
    "tool.call.accepted", "tool.call.completed", "tool.call.failed", "tool.call.result_unknown",
    "tool.call.reconciled", "tool.call.retry_requested", "tool.call.held", "verification.updated",
})
"""The fact types a story reads (the run page decodes only these for it)."""
_RECONCILED = {"found_completed": "found completed at the provider", "found_failed": "found failed at the provider",
               "not_found": "not found at the provider"}
_VERIFIED = {"confirmed_success": "settled", "confirmed_failure": "the provider reports it did not happen",
             "inconclusive": "verification inconclusive"}


@dataclass(frozen=True)
class Story:
    """The header: its sentences, and how many older tool calls it leaves out."""

    sentences: tuple[str, ...]
    earlier_calls: int = 0

    @property
    def text(self) -> str:
        return " ".join(self.sentences)


def _words(code: str) -> str:
    return code.replace("_", " ")


def clock(at: datetime) -> str:
    """'10:42 UTC' (the date is on the timeline)."""
    return at.astimezone(UTC).strftime("%H:%M UTC")


def who(actor: Actor | None) -> str:
    """A name the viewer may read, else the actor's role in words ('a support agent')."""
    if actor is None:
        return "the agent"
    if actor.subjectId and actor.subjectId != MASK:
        return actor.subjectId
    role = _words(actor.roles[0]) if actor.roles else "someone"
    return f"{'an' if role[:1] in 'aeio' else 'a'} {role}"


def what(proposed: Any, auditor: bool) -> str:
    """The call in words: its summary for auditors, else action, target and the arguments this
    viewer may read."""
    if auditor and proposed.summary and proposed.summary != MASK:
        return str(proposed.summary)
    shown = [line for line in display_lines(masked(proposed.display)) if "[personal]" not in line] \
        if proposed.display is not None else []
    head = f"{proposed.action.capitalize()} on {proposed.target}"
    return f"{head} ({', '.join(shown)})" if shown else head


@dataclass
class _Call:
    what: str
    steps: list[str]
    proposer: str = "the agent"
    waiting: str = ""  # an approval asked and not decided yet


def story(events: Sequence[EventBase], auditor: bool, calls_told: int = CALLS_TOLD, untold: int = 0) -> Story:
    """The run's story from its facts (oldest first, as this viewer may read them); `untold`:
    older tool calls whose facts were left out of `events` (counted, not told)."""
    calls: dict[str, _Call] = {}
    head: list[str] = []
    ending = ""
    children: list[str] = []
    undoes: dict[str, str] = {}  # a compensation's call -> the call it undoes
    for event in events:
        p: Any = event.payload
        t = event.eventType
        call = calls.get(getattr(p, "toolCallId", "") or "")
        if t == "run.created":
            head.append(f"Goal «{p.goalSummary}» for {p.userId}." if auditor else "")
            ending = "Running."
        elif t == "run.parent_linked":
            head.append(f"Child run of {p.parentRunId}.")
        elif t == "tool.call.proposed":
            calls[p.toolCallId] = _Call(what(p, auditor), [])
            if p.toolCallId in undoes:
                calls[p.toolCallId].proposer = f"the run decider to undo {undoes[p.toolCallId]}"
        elif call is None:
            ending = _run_step(t, p, ending, children)
        else:
            if t == "compensation.started":
                undoes[p.compensationToolCallId] = p.toolCallId
            _call_step(call, event)
    told = list(calls.values())[-calls_told:] if calls_told else []
    sentences = [s for s in head if s]
    earlier = untold + len(calls) - len(told)
    if earlier:
        sentences.append(f"{earlier} earlier tool call{'s' if earlier != 1 else ''} not told here.")
    for c in told:
        steps = [f"proposed by {c.proposer}", *c.steps] + ([c.waiting] if c.waiting else [])
        sentences.append(f"{c.what} {', '.join(steps)}.")
    sentences += children
    if ending:
        sentences.append(ending)
    return Story(tuple(sentences), earlier)


def _call_step(call: _Call, event: EventBase) -> None:
    p: Any = event.payload
    t = event.eventType
    at = lambda: clock(p.expiresAt)  # noqa: E731
    if t == "approval.required":
        call.proposer = who(p.proposedBy) if p.proposedBy is not None else call.proposer
        call.waiting = f"waiting for a {_words(p.requiredRole)}'s approval (until {at()})"
        return
    call.waiting = "" if t.startswith("approval.") else call.waiting
    step = {
        "approval.granted": lambda: f"approved by {who(p.actor)}",
        "approval.rejected": lambda: f"rejected by {who(p.actor)}",
        "approval.expired": lambda: f"approval expired at {at()}",
        "approval.invalidated": lambda: f"approval invalidated ({_words(p.reason)})",
        "tool.call.dispatching": lambda: "sent" if p.attempt <= 1 else f"sent again (attempt {p.attempt})",
        "tool.call.accepted": lambda: "accepted by the provider",
        "tool.call.completed": lambda: "completed",
        "tool.call.failed": lambda: f"failed ({_words(p.errorClass)}, "
                                    f"{'retryable' if p.retryable else 'not retryable'})",
        "tool.call.result_unknown": lambda: "response lost",
        "tool.call.reconciled": lambda: _RECONCILED.get(p.outcome, f"reconciled: {_words(p.outcome)}"),
        "tool.call.retry_requested": lambda: f"retry requested by {who(p.actor)}",
        "tool.call.held": lambda: f"held: its capability is paused ({p.reason or 'no reason given'})",
        "verification.updated": lambda: _VERIFIED.get(p.status, ""),
        "compensation.started": lambda: f"undone by {p.compensationToolCallId}",
    }.get(t)
    said = step() if step is not None else ""
    if said and t in ("approval.granted", "approval.rejected"):
        said += f" at {clock(event.occurredAt)}"
    if said:
        call.steps.append(said)


def _run_step(t: str, p: Any, ending: str, children: list[str]) -> str:
    if t == "child.requested":
        children.append(f"Started child run {p.childRunId}.")
    elif t == "child.reported":
        children.append(f"Child run {p.childRunId} {_words(p.status)}"
                        + (f" ({_words(p.reason)})." if p.reason else "."))
    ends = {
        "run.paused": lambda: f"Paused: {_words(p.reason)}.",
        "run.resumed": lambda: "Running.",
        "run.completed": lambda: "Run completed.",
        "run.failed": lambda: f"Run failed ({_words(p.errorClass)}).",
        "run.cancel_requested": lambda: f"Cancel requested by {who(p.actor)}.",
        "run.cancelled": lambda: "Run cancelled.",
        "run.needs_review": lambda: f"Needs review: {_words(p.reason)}.",
        "run.compensated": lambda: f"Run compensated: reversed {', '.join(p.compensatedToolCalls) or 'nothing'}.",
    }.get(t)
    return ends() if ends is not None else ending
