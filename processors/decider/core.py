"""The run decider: `decide(command, state, ctx) -> events`, pure.

Steps for every command (docs/decider.md has the rules):
1. A command id the run has already seen yields nothing (no second effect).
2. The actor and its source are checked against the policy (`ctx.check_command`).
3. `run.create` needs no run; every other command needs one, not archived. A tenant-bound
   actor acts only in its own tenant (`ctx.check_tenant`: the run's, or the new run's).
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
from functools import cache

from runfacts.processors.decider.commands import children
from runfacts.processors.decider.commands.run import (
    HANDLERS,
    control_tool,
    create_run,
    drain_version,
    erase_subject,
    follow_ups,
)
from runfacts.processors.decider.context import DecideContext, Draft, Rejected, draft
from runfacts.processors.decider.evolve import fold
from runfacts.processors.decider.state import RunState
from runfacts.schemas import commands as cmd
from runfacts.schemas import events as ev
from runfacts.schemas.common import CommandBase, EventBase
from runfacts.schemas.construct import trusted

__all__ = ["DecideContext", "decide", "decide_evolve", "event_id", "stamp"]


def decide(command: CommandBase, state: RunState | None, ctx: DecideContext) -> list[EventBase]:
    """The events `command` causes on `state`, or one `command.rejected` (see module doc)."""
    return decide_evolve(command, state, ctx)[0]


def decide_evolve(command: CommandBase, state: RunState | None,
                  ctx: DecideContext) -> tuple[list[EventBase], RunState | None]:
    """`decide`, plus the state after its events (folded once, for the shell)."""
    if state is not None and state.seen(command.commandId):
        return [], state
    try:
        drafts = _decide(command, state, ctx)
    except Rejected as rejected:
        event = _rejection(command, state, rejected, ctx)
        return [event], fold(state, [event])
    events = stamp(command, drafts, 0, ctx)
    after = fold(state, events)
    more = stamp(command, follow_ups(after, command, ctx), len(events), ctx)
    return events + more, fold(after, more)


def _decide(command: CommandBase, state: RunState | None, ctx: DecideContext) -> list[Draft]:
    denied = ctx.check_command(command)
    if denied is not None:
        needs = ctx.required_roles(command.commandType) if denied == "forbidden_role" else ()
        missing = f"; {command.commandType} needs the role {' or '.join(needs)}" if needs else ""
        raise Rejected(command, denied, f"actor {command.actor.subjectId or '<none>'} "
                       f"via {command.actor.authSource or '<none>'}{missing}")
    if isinstance(command, cmd.EraseSubject):  # not a run: no state before or after
        return erase_subject(command, state)
    if isinstance(command, cmd.DrainVersion):  # not a run either: the shell keeps the partition's drains
        return drain_version(command, state)
    if isinstance(command, cmd.PauseTool | cmd.ResumeTool):  # a capability's pause: not a run either
        return control_tool(command, state, ctx)
    if isinstance(command, cmd.CreateRun | cmd.CreateChildRun):
        if state is not None:
            raise Rejected(command, "run_exists")
        _check_tenant(command, command.payload.tenant, ctx)
        if isinstance(command, cmd.CreateChildRun):
            return children.create_child(command, ctx)
        return create_run(command, ctx)
    if state is None:
        raise Rejected(command, "unknown_run")
    _check_tenant(command, state.tenant, ctx)
    if state.archived and not _outlives_archive(command):
        raise Rejected(command, "run_archived")
    if command.expectedVersion is not None and command.expectedVersion != state.version:
        raise Rejected(command, "stale_version",
                       f"expected {command.expectedVersion}, run is at {state.version}")
    handler = HANDLERS.get(command.commandType)
    if handler is None:
        raise Rejected(command, "unsupported_command", command.commandType)
    return handler(command, state, ctx)


def _outlives_archive(command: CommandBase) -> bool:
    """A memory outlives its run: it is revocable for ever and its expiry timer still fires."""
    return command.commandType == "memory.revoke" or (
        isinstance(command, cmd.FireTimer) and command.payload.kind == "memory_expiry")


def _check_tenant(command: CommandBase, run_tenant: str | None, ctx: DecideContext) -> None:
    denied = ctx.check_tenant(command, run_tenant)
    if denied is not None:
        actor = command.actor  # the run's tenant stays unnamed: the rejection may reach another tenant
        raise Rejected(command, denied, f"actor {actor.subjectId} via {actor.authSource} acts in tenant "
                       f"{actor.tenant or '<none>'} only")


def event_id(run_id: str, command_id: str, index: int) -> str:
    """Deterministic event id: the same command on the same run gives the same ids."""
    digest = hashlib.sha256(f"{run_id}\x00{command_id}\x00{index}".encode()).hexdigest()
    return f"evt-{digest[:32]}"


def stamp(command: CommandBase, drafts: list[Draft], start: int, ctx: DecideContext) -> list[EventBase]:
    """Drafts -> events with envelope ids, time and causation from the command.

    Payloads were validated when drafted and every envelope field comes from the validated
    command, so the envelope is assembled without a second validation pass (hot path).
    """
    run_id, command_id = command.runId, command.commandId
    base = {"runId": run_id, "producer": ctx.producer, "correlationId": command.correlationId,
            "causationId": command_id, "occurredAt": command.issuedAt}
    return [
        trusted(d.event, {
            **base, "eventId": event_id(run_id, command_id, start + i), "eventType": _type_of(d.event),
            "turnId": d.turnId, "reasoningObjectId": d.reasoningObjectId, "capabilityId": d.capabilityId,
            "schemaVersion": _version_of(d.event), "payload": d.payload})
        for i, d in enumerate(drafts)
    ]


@cache
def _type_of(event: type[EventBase]) -> str:
    return event.model_fields["eventType"].default


@cache
def _version_of(event: type[EventBase]) -> int:
    return event.model_fields["schemaVersion"].default


def _rejection(command: CommandBase, state: RunState | None, rejected: Rejected,
               ctx: DecideContext) -> EventBase:
    actual = 0 if state is None else state.version
    d = draft(ev.CommandRejected, commandId=command.commandId, commandType=command.commandType,
              reasonCode=rejected.reason, detail=rejected.detail,
              expectedVersion=command.expectedVersion, actualVersion=actual)
    return stamp(command, [d], 0, ctx)[0]
