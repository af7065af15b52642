"""Event payloads of compensation (docs/semantics.md §16): a completed side effect's undo, as facts.

Their own module so the contract's other lists stay untouched; `events.EVENTS` includes them.
"""

from __future__ import annotations

from typing import Any

from runfacts.schemas.spec.fields import ACTOR, SNAKE_CASE, STRING, TypeSpec, f, many, opt


def _command(name: str, type_name: str, doc: str, fields: list[dict[str, Any]]) -> TypeSpec:
    return TypeSpec("command", name, type_name, 1, doc, tuple(fields))


def _event(name: str, type_name: str, doc: str, fields: list[dict[str, Any]]) -> TypeSpec:
    return TypeSpec("event", name, type_name, 1, doc, tuple(fields))


COMPENSATION_EVENTS: list[TypeSpec] = [
    _event("CompensationPlanned", "compensation.planned",
           "How a completed call would be undone: its compensation's arguments, or why not.", [
               f("toolCallId", STRING, "The completed call that would be undone."),
               f("compensationCapabilityId", STRING, "The capability that undoes it (its manifest's compensation)."),
               opt("arguments", STRING, "Canonical JSON of the compensating call's arguments; null when "
                                        "`problem` says why they cannot be derived.", pii=True),
               opt("problem", STRING, "Why the arguments cannot be derived (a person must undo the effect)."),
           ]),
    _event("CompensationStarted", "compensation.started",
           "The run undoes a completed call: the compensating call (an ordinary governed call) follows.", [
               f("toolCallId", STRING, "The completed call being undone."),
               f("compensationToolCallId", STRING, "The compensating call's id (`<toolCallId>-undo`)."),
               f("compensationCapabilityId", STRING),
               f("reason", STRING, "run_cancelled or run_failed: why the run compensates.", pattern=SNAKE_CASE),
               many("remaining", STRING, "Completed calls still to undo after this one, in order (newest first)."),
               f("detail", STRING, "The failure's detail when a failing run compensates.", default="", pii=True),
           ]),
    _event("RunCompensated", "run.compensated",
           "Every completed call with a compensation was undone: terminal.", [
               f("reason", STRING, "run_cancelled or run_failed: why the run compensated.", pattern=SNAKE_CASE),
               many("compensatedToolCalls", STRING, "The calls undone, in the order they were undone."),
               many("unresolvedToolCalls", STRING, "Calls whose outcome a person must still settle."),
           ]),
]

_DECISION_DOC = ("retry (a new compensating call `<toolCallId>-undo-<n>`, same arguments and idempotency key), "
                 "done_by_hand (a person undid it: the older undos go on) or give_up (the run ends failed, "
                 "compensation_abandoned, the rest left undone).")
_NOTE_DOC = "What the person did or why (the audit chain keeps it)."

COMPENSATION_COMMANDS: list[TypeSpec] = [
    _command("ResolveCompensation", "compensation.resolve",
             "A person resolves an undo that stopped the run in needs_review (operator).", [
                 f("toolCallId", STRING, "The completed call whose undo stopped (its plan's toolCallId)."),
                 f("decision", STRING, _DECISION_DOC, pattern=SNAKE_CASE),
                 f("note", STRING, _NOTE_DOC, default="", pii=True),
             ]),
]

COMPENSATION_EVENTS.append(
    _event("CompensationResolved", "compensation.resolved",
           "A person resolved an undo that stopped for review: the run compensates again, or ends.", [
               f("toolCallId", STRING, "The completed call whose undo stopped."),
               f("decision", STRING, _DECISION_DOC, pattern=SNAKE_CASE),
               f("note", STRING, _NOTE_DOC, default="", pii=True),
               f("reason", STRING, "run_cancelled or run_failed: why the run compensates.", pattern=SNAKE_CASE),
               many("notUndone", STRING, "give_up: the completed calls left undone, newest first."),
               f("actor", ACTOR),
           ]))
