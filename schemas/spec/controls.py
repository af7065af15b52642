"""Operator controls of tools for the whole fleet: pause and resume a capability
(docs/dispatcher.md "Paused capabilities").

`tool.pause` / `tool.resume` (operator) are not commands on a run: they travel under runId
`tools-<capabilityId>` (one partition per capability, so a pause and its resume stay in order),
and the decider records `tool.paused` / `tool.resumed` on the events topic (the audit chain) and,
in the same transaction, on the compacted `<prefix>.tools.control` topic (key capabilityId) that
every dispatcher reads whole (docs/dispatcher.md "Paused capabilities"). A dispatcher that holds
a call of a paused capability reports it (`tool.call.report_held` -> `tool.call.held`), so the
run says why its call waits.
"""

from __future__ import annotations

from runfacts.schemas.spec.commands import command
from runfacts.schemas.spec.events import event
from runfacts.schemas.spec.fields import ACTOR, STRING, TIMESTAMP, TypeSpec, f

_REASON = "Why (shown to everyone who sees a held call: no personal data)."

CONTROL_COMMANDS: tuple[TypeSpec, ...] = (
    command("PauseTool", "tool.pause", "Pause a capability for the whole fleet (operator): no new dispatch.", [
        f("capabilityId", STRING),
        f("reason", STRING, _REASON),
    ]),
    command("ResumeTool", "tool.resume", "Resume a paused capability (operator): held calls are dispatched.", [
        f("capabilityId", STRING),
        f("reason", STRING, _REASON, default=""),
    ]),
    command("ReportToolHeld", "tool.call.report_held",
            "A dispatcher holds a call because its capability is paused.", [
        f("toolCallId", STRING),
        f("pauseId", STRING, "The eventId of the tool.paused fact that holds it."),
        f("pausedBy", STRING, "The operator's subjectId."),
        f("reason", STRING, _REASON, default=""),
        f("pausedAt", TIMESTAMP),
    ]),
)

CONTROL_EVENTS: tuple[TypeSpec, ...] = (
    event("ToolPaused", "tool.paused", "A capability (the envelope's capabilityId) is paused for the whole fleet.", [
        f("reason", STRING, _REASON),
        f("actor", ACTOR),
    ]),
    event("ToolResumed", "tool.resumed", "A paused capability (the envelope's capabilityId) is resumed.", [
        f("reason", STRING, _REASON, default=""),
        f("actor", ACTOR),
    ]),
    event("ToolCallHeld", "tool.call.held", "A call waits: its capability is paused (until it is resumed).", [
        f("toolCallId", STRING),
        f("pauseId", STRING, "The eventId of the tool.paused fact that holds it."),
        f("pausedBy", STRING, "The operator's subjectId."),
        f("reason", STRING, _REASON, default=""),
        f("pausedAt", TIMESTAMP),
    ]),
)
