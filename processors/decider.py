"""The run decider: `decide(command, state, ctx) -> events`, pure.

Steps for every command (docs/decider.md has the rules):
1. A command id the run has already seen yields nothing (no second effect).
2. The actor and its source are checked against the policy (`ctx.check_command`).
3. `run.create` needs no run; every other command needs one, not archived.
4. A given `expectedVersion` must equal the run's version (stale -> rejected).
5. The command's handler returns drafts (event class + payload) or raises `Rejected`.
6. Drafts are stamped into events: ids from (runId, commandId, index), time from
   `issuedAt`, causation = the command, correlation carried over.
7. Follow-ups that depend on the new state (a cancellation whose last in-flight call just
   settled) are decided on the folded state and stamped after.
A rejection is a single `command.rejected` event; it never changes the run's version.
"""

from __future__ import annotations

import hashlib

from runfacts.processors.decide_run import HANDLERS, create_run, follow_ups
from runfacts.processors.decision import DecideContext, Draft, Rejected, draft
from runfacts.processors.run_evolve import fold
from runfacts.processors.run_state import RunState
from runfacts.schemas import commands as cmd
from runfacts.schemas import events as ev
from runfacts.schemas.common import CommandBase, EventBase

__all__ = ["DecideContext", "decide", "event_id", "stamp"]


def decide(command: CommandBase, state: RunState | None, ctx: DecideContext) -> list[EventBase]:
    """The events `command` causes on `state`, or one `command.rejected` (see module doc)."""
    if state is not None and state.seen(command.commandId):
        return []
    try:
        drafts = _decide(command, state, ctx)
    except Rejected as rejected:
        return [_rejection(command, state, rejected, ctx)]
    events = stamp(command, drafts, 0, ctx)
    if events:
        more = follow_ups(fold(state, events), command, ctx)
        events += stamp(command, more, len(events), ctx)
    return events


def _decide(command: CommandBase, state: RunState | None, ctx: DecideContext) -> list[Draft]:
    denied = ctx.check_command(command)
    if denied is not None:
        raise Rejected(command, denied, f"actor {command.actor.subjectId or '<none>'} "
                       f"via {command.actor.authSource or '<none>'}")
    if isinstance(command, cmd.CreateRun):
        if state is not None:
            raise Rejected(command, "run_exists")
        return create_run(command, ctx)
    if state is None:
        raise Rejected(command, "unknown_run")
    if state.archived:
        raise Rejected(command, "run_archived")
    if command.expectedVersion is not None and command.expectedVersion != state.version:
        raise Rejected(command, "stale_version",
                       f"expected {command.expectedVersion}, run is at {state.version}")
    handler = HANDLERS.get(command.commandType)
    if handler is None:
        raise Rejected(command, "unsupported_command", command.commandType)
    return handler(command, state, ctx)


def event_id(run_id: str, command_id: str, index: int) -> str:
    """Deterministic event id: the same command on the same run gives the same ids."""
    digest = hashlib.sha256(f"{run_id}\x00{command_id}\x00{index}".encode()).hexdigest()
    return f"evt-{digest[:32]}"


def stamp(command: CommandBase, drafts: list[Draft], start: int, ctx: DecideContext) -> list[EventBase]:
    """Drafts -> events with envelope ids, time and causation from the command."""
    return [
        d.event(
            eventId=event_id(command.runId, command.commandId, start + i), runId=command.runId,
            turnId=d.turnId, producer=ctx.producer, reasoningObjectId=d.reasoningObjectId,
            capabilityId=d.capabilityId, correlationId=command.correlationId,
            causationId=command.commandId, occurredAt=command.issuedAt, payload=d.payload,
        )
        for i, d in enumerate(drafts)
    ]


def _rejection(command: CommandBase, state: RunState | None, rejected: Rejected,
               ctx: DecideContext) -> EventBase:
    actual = 0 if state is None else state.version
    d = draft(ev.CommandRejected, commandId=command.commandId, commandType=command.commandType,
              reasonCode=rejected.reason, detail=rejected.detail,
              expectedVersion=command.expectedVersion, actualVersion=actual)
    return stamp(command, [d], 0, ctx)[0]
