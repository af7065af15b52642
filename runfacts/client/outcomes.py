"""What a run's facts say, pure: a command's outcome, a tool call's decision and its result.

Every function reads a run's journal (its events in log order, with their offsets) and returns
`None` while the facts do not decide yet, or a `Resolved` holding the value or the typed error.
This is the one place that knows which facts end a wait: after a lost response success arrives
as `tool.call.reconciled(found_completed)`, not `tool.call.completed`, and both give the value
through `result_value`. Sealed personal fields (the result, a failure's detail: the dispatcher
seals them when privacy keys are configured) are revealed through `runfacts.privacy.reveal` with
the key view `keys()` gives, asked for only when a value is sealed: the plain value, or a marker
(`[erased]` once the run's user was erased, `[encrypted]` for a client without keys).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from runfacts.client import errors
from runfacts.privacy.envelope import MARKERS, NO_KEYS, KeyView, is_protected, reveal
from runfacts.schemas import events as ev
from runfacts.schemas.common import EventBase


class Entry:
    """One event of a run's journal and where it sits in its partition.

    Kept small (a waiting run holds a handful): the fields the checks filter on, and either the
    decoded event or its record bytes plus the decoder, decoded again only when a check reads
    its payload (`event`)."""

    __slots__ = ("offset", "at_ms", "event_type", "causation_id", "tool_call_id", "_event", "_raw", "_decode")

    def __init__(self, offset: int, event: EventBase, at_ms: int = 0, raw: bytes | None = None,
                 decode: Callable[[bytes], EventBase] | None = None) -> None:
        self.offset, self.at_ms = offset, at_ms
        self.event_type, self.causation_id = event.eventType, event.causationId
        self.tool_call_id: str | None = getattr(event.payload, "toolCallId", None)
        keep = raw is None or decode is None
        self._event: EventBase | None = event if keep else None
        self._raw, self._decode = raw, decode

    @property
    def event(self) -> EventBase:
        if self._event is not None:
            return self._event
        assert self._raw is not None and self._decode is not None
        return self._decode(self._raw)

    def __repr__(self) -> str:
        return f"Entry({self.offset}, {self.event_type})"


@dataclass(frozen=True)
class Resolved:
    """A decided wait: the value, or the error to raise."""

    value: Any = None
    error: errors.ClientError | None = None

    def unwrap(self) -> Any:
        if self.error is not None:
            raise self.error
        return self.value


Keys = Callable[[], KeyView]


def _no_keys() -> KeyView:
    return NO_KEYS


def revealed(value: Any, field: str, keys: Keys) -> Any:
    """A personal field's plain value (keys asked for only when it is sealed), or a marker."""
    return reveal(value, field, keys()) if is_protected(value) else value


def result_value(payload: Any, keys: Keys = _no_keys) -> Any:
    """The tool's result value carried by a completion fact (`tool.call.completed` or
    `tool.call.reconciled`): its `result` field, JSON text, decoded; None when it carries none;
    the marker (`[erased]`, `[encrypted]`, `[unreadable]`) when it cannot be revealed."""
    raw = revealed(getattr(payload, "result", None), "result", keys)
    return raw if raw is None or raw in MARKERS else json.loads(raw)


def command_events(entries: Sequence[Entry], command_id: str) -> list[Entry]:
    """The events the decider answered `command_id` with (one transaction: contiguous)."""
    return [e for e in entries if e.causation_id == command_id]


def version_after(entries: Sequence[Entry], offset: int) -> int:
    """The run's version once the event at `offset` is applied: its events so far but rejections
    (a rejection never changes the version). The journal must hold the run from its start."""
    return sum(1 for e in entries if e.offset <= offset and e.event_type != "command.rejected")


def command_error(run_id: str, answer: Sequence[EventBase]) -> errors.ClientError | None:
    """The error a command's answer means for its sender: a rejection, or a review instead."""
    for event in answer:
        if isinstance(event, ev.CommandRejected):
            p = event.payload
            return errors.CommandRejected(run_id, p.commandType, p.reasonCode, p.detail)
        if isinstance(event, ev.RunNeedsReview):
            return errors.RunNeedsReview(run_id, event.payload.reason, event.payload.detail)
    return None


RUN_ENDINGS = frozenset({"run.needs_review", "run.cancel_requested", "run.cancelled", "run.completed", "run.failed",
                         "run.compensated"})
"""The run's own facts that end a call's wait."""


def _call_events(entries: Sequence[Entry], tool_call_id: str) -> list[EventBase]:
    """The call's events and the run's endings after the call was proposed (decoded)."""
    out: list[EventBase] = []
    proposed = False
    for entry in entries:
        if entry.tool_call_id == tool_call_id:
            proposed = True
            out.append(entry.event)
        elif proposed and entry.tool_call_id is None and entry.event_type in RUN_ENDINGS:
            out.append(entry.event)
    return out


def _refusal(run_id: str, call_id: str, event: EventBase, keys: Keys = _no_keys) -> errors.ClientError | None:
    """The error an approval, run or failure fact means for a call that is not done."""
    p: Any = event.payload
    match event.eventType:
        case "approval.rejected":
            return errors.ApprovalRejected(run_id, call_id, p.actor.subjectId)
        case "approval.expired":
            return errors.ApprovalExpired(run_id, call_id, int(p.expiresAt.timestamp() * 1000))
        case "approval.invalidated" if p.reason == "run_cancelled":
            return errors.RunCancelled(run_id, call_id)
        case "approval.invalidated":
            return errors.ApprovalInvalidated(run_id, call_id, p.reason, p.detail)
        case "tool.call.failed":
            return errors.ToolFailed(run_id, call_id, p.errorClass, p.retryable, revealed(p.detail, "detail", keys))
        case "run.needs_review":
            return errors.RunNeedsReview(run_id, p.reason, p.detail, call_id)
        case "run.cancel_requested" | "run.cancelled":
            return errors.RunCancelled(run_id, call_id)
        case "run.completed" | "run.failed" | "run.compensated":
            return errors.RunEnded(run_id, event.eventType.removeprefix("run."), call_id)
    return None


def call_result(run_id: str, entries: Sequence[Entry], tool_call_id: str, keys: Keys = _no_keys) -> Resolved | None:
    """The call's result value once it completed (directly or found by reconciliation), its
    typed error once it cannot (rejected, expired, failed, review, cancelled); else None."""
    for event in _call_events(entries, tool_call_id):
        p: Any = event.payload
        if isinstance(event, ev.ToolCallCompleted):
            return Resolved(result_value(p, keys))
        if isinstance(event, ev.ToolCallReconciled):
            if p.outcome == "found_completed":
                return Resolved(result_value(p, keys))
            if p.outcome == "found_failed":
                return Resolved(error=errors.ToolFailed(run_id, tool_call_id, "found_failed", False,
                                                        "reconciliation found the call failed"))
            continue  # not_found: re-dispatched; still_unknown: looked up again
        refused = _refusal(run_id, tool_call_id, event, keys)
        if refused is not None:
            return Resolved(error=refused)
    return None


@dataclass(frozen=True)
class Decision:
    """How a call was authorized: by policy (no approval needed) or by an approver."""

    tool_call_id: str
    approval_id: str | None
    approver: str | None

    @property
    def by_policy(self) -> bool:
        return self.approval_id is None


def call_decision(run_id: str, entries: Sequence[Entry], tool_call_id: str) -> Resolved | None:
    """A `Decision` once the call is authorized, the typed error once it never will be; else None."""
    approver: str | None = None
    for event in _call_events(entries, tool_call_id):
        p: Any = event.payload
        if isinstance(event, ev.ApprovalGranted):
            approver = p.actor.subjectId
        elif isinstance(event, ev.ToolCallAuthorized):
            return Resolved(Decision(tool_call_id, p.approvalId, approver))
        elif not isinstance(event, ev.ToolCallFailed | ev.RunCompleted):
            refused = _refusal(run_id, tool_call_id, event)
            if refused is not None:
                return Resolved(error=refused)
    return None


def latest_link(entries: Sequence[Entry], tool_call_id: str) -> str:
    """The call `tool_call_id` as last proposed: itself, or its latest re-authorization
    `<id>-r<n>` (proposed again after its approval expired: the decider's `_reauthorized`)."""
    proposed = {e.tool_call_id for e in entries if e.event_type == "tool.call.proposed"}
    latest, n = tool_call_id, 1
    while f"{tool_call_id}-r{n}" in proposed:
        latest, n = f"{tool_call_id}-r{n}", n + 1
    return latest


def pending_approval(entries: Sequence[Entry], tool_call_id: str) -> ev.ApprovalRequired | None:
    """The call's latest approval request, if it asked for one."""
    found = None
    for entry in entries:
        if entry.event_type == "approval.required" and entry.tool_call_id == tool_call_id:
            found = entry
    return None if found is None else found.event  # type: ignore[return-value]


RELEASED = frozenset({"tool.call.dispatching", "tool.call.completed", "tool.call.failed",
                      "tool.call.result_unknown", "grant.revoked"})


def held(entries: Sequence[Entry], tool_call_id: str) -> str | None:
    """Why the call waits, when its capability is paused (`tool.call.held` not followed by a claim
    or an outcome): "waiting: payments.refund paused by olga: provider incident", else None."""
    found: Entry | None = None
    for entry in entries:
        if entry.tool_call_id != tool_call_id:
            continue
        if entry.event_type == "tool.call.held":
            found = entry
        elif entry.event_type in RELEASED:
            found = None
    if found is None:
        return None
    event = found.event
    p: Any = event.payload
    return f"waiting: {event.capabilityId} paused by {p.pausedBy}" + (f": {p.reason}" if p.reason else "")


TERMINAL = frozenset({"run.completed", "run.failed", "run.cancelled", "run.compensated"})


def ended(entries: Sequence[Entry]) -> bool:
    """True once the run reached a terminal fact."""
    return any(e.event_type in TERMINAL for e in entries)
