"""Control for people, pure: build a run's commands from its current State, read their outcome.

A person never writes State: the CLI and the dashboard build a command (expected version and
argument hash taken from the State or View they show), send it, and report what the run
decider decided — the accepted events or the typed rejection (`command.rejected`).
Clock, ids and the authenticated actor come in from the caller.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import Any, cast

from runfacts.processors.decider.commands.compensation import RESOLUTIONS, stopped
from runfacts.processors.decider.commands.run import DRAIN_DIMENSIONS, drain_run_ids
from runfacts.processors.decider.state import RunState, ToolCallState
from runfacts.schemas import commands as cmd
from runfacts.schemas.common import Actor, ApprovalDecision, CommandBase, EventBase, RunVersions
from runfacts.schemas.errors import RunfactsError


class ControlError(RunfactsError):
    """A command that cannot even be built from the run's State (unknown run, approval, call)."""


@dataclass(frozen=True)
class Issue:
    """Who sends a command, when, and its id."""

    actor: Actor
    command_id: str
    issued_at: datetime
    correlation_id: str | None = None


def _envelope(state: RunState, issue: Issue) -> dict[str, Any]:
    return {"commandId": issue.command_id, "runId": state.runId, "expectedVersion": state.version,
            "actor": issue.actor, "issuedAt": issue.issued_at,
            "correlationId": issue.correlation_id or f"ops:{issue.command_id}"}


def approval_decision(value: str) -> ApprovalDecision:
    """`value` as an approval decision; ValueError naming it when it is neither."""
    if value not in ("approve", "reject"):
        raise ValueError(f"decision {value!r}: must be approve or reject")
    return cast(ApprovalDecision, value)


def resume_command(state: RunState, approval_id: str, decision: ApprovalDecision, issue: Issue,
                   token: str | None = None) -> cmd.ResumeRun:
    """Approve or reject `approval_id` at the run's current version, bound to its arguments."""
    approval = state.approvals.get(approval_id)
    if approval is None:
        known = ", ".join(state.approvals) or "none"
        raise ControlError(f"run {state.runId} has no approval {approval_id} (approvals: {known})")
    payload = cmd.ResumeRunPayload(approvalId=approval_id, decision=decision, argsHash=approval.argsHash,
                                   approvalToken=token, displayDigest=approval.displayDigest)
    return cmd.ResumeRun(**_envelope(state, issue), payload=payload)


def review_memory_command(state: RunState, memory_id: str, decision: ApprovalDecision, issue: Issue,
                          token: str | None = None) -> cmd.ReviewMemory:
    """Confirm ("approve") or reject the run's memory candidate `memory_id`, bound to its hash."""
    memory = state.memories.get(memory_id)
    if memory is None:
        known = ", ".join(state.memories) or "none"
        raise ControlError(f"run {state.runId} has no memory candidate {memory_id} (candidates: {known})")
    if memory.status != "proposed":
        raise ControlError(f"memory {memory_id} is {memory.status}: only a proposed candidate is reviewed")
    payload = cmd.ReviewMemoryPayload(memoryId=memory_id, decision=decision, candidateHash=memory.candidateHash,
                                      reviewToken=token)
    return cmd.ReviewMemory(**_envelope(state, issue), payload=payload)


def stop_command(state: RunState, issue: Issue, reason: str = "") -> cmd.StopRun:
    return cmd.StopRun(**_envelope(state, issue), payload=cmd.StopRunPayload(reason=reason))


def cancel_command(state: RunState, issue: Issue, reason: str = "") -> cmd.CancelRun:
    return cmd.CancelRun(**_envelope(state, issue), payload=cmd.CancelRunPayload(reason=reason))


def retry_command(state: RunState, tool_call_id: str, issue: Issue) -> cmd.RetryToolCall:
    settled = state.settledCalls.get(tool_call_id)
    if settled is not None:
        raise ControlError(f"tool call {tool_call_id} of run {state.runId} ended ({settled[0]}) and is "
                           "compacted: nothing to retry (its history: runfacts replay / the audit log)")
    if tool_call_id not in state.toolCalls:
        known = ", ".join(state.toolCalls) or "none"
        raise ControlError(f"run {state.runId} has no tool call {tool_call_id} (tool calls: {known})")
    return cmd.RetryToolCall(**_envelope(state, issue), payload=cmd.RetryToolCallPayload(toolCallId=tool_call_id))


def migrate_command(state: RunState, versions: RunVersions, node: str, issue: Issue) -> cmd.MigrateRun:
    """Move the run to `versions` (the decider's current ones), resuming at `node` (audited: run.migrated)."""
    return cmd.MigrateRun(**_envelope(state, issue), payload=cmd.MigrateRunPayload(versions=versions, toNode=node))


def resolve_compensation_command(state: RunState, decision: str, note: str, issue: Issue,
                                 tool_call_id: str | None = None) -> cmd.ResolveCompensation:
    """Resolve the undo that stopped the run for a person (`compensation.resolve`, operator):
    retry it, count it done by hand, or give up (docs/semantics.md §16). The call defaults to the
    one whose undo stopped; the decider checks it again at its own version."""
    if decision not in RESOLUTIONS:
        raise ControlError(f"decision {decision!r}: one of {', '.join(RESOLUTIONS)}")
    plan = stopped(state)
    if plan is None:
        raise ControlError(f"run {state.runId} is {state.status} ({state.statusReason or 'no reason'}): no undo of "
                           "it stopped for a person (see runfacts inspect RUN)")
    payload = cmd.ResolveCompensationPayload(toolCallId=tool_call_id or plan.toolCallId, decision=decision, note=note)
    return cmd.ResolveCompensation(**_envelope(state, issue), payload=payload)


def drain_commands(dimension: str, version: str, partitions: int, issue: Issue, undo: bool = False,
                   reason: str = "") -> list[cmd.DrainVersion]:
    """One `version.drain` per partition of the commands topic (each partition's decider refuses
    new runs on the version once it has recorded it); ids `<command id>-p<n>`."""
    if dimension not in DRAIN_DIMENSIONS:
        raise ControlError(f"dimension {dimension!r}: one of {', '.join(DRAIN_DIMENSIONS)}")
    payload = cmd.DrainVersionPayload(dimension=dimension, version=version, undo=undo, reason=reason)
    return [cmd.DrainVersion(commandId=f"{issue.command_id}-p{n}", runId=run_id, actor=issue.actor,
                             issuedAt=issue.issued_at, correlationId=issue.correlation_id or f"ops:{issue.command_id}",
                             payload=payload)
            for n, run_id in enumerate(drain_run_ids(dimension, version, partitions))]


def reauthorize_command(state: RunState, approval_id: str, issue: Issue) -> cmd.ProposeToolCall:
    """Ask for re-authorization of an expired approval: its call proposed again with the same
    arguments (same argsHash, so the same idempotency key) under the id the agent proposed it with;
    the decider proposes it as the next link of its chain (`<call>-r<n>`), for a new approval, as
    for an agent proposing it again. The policy's `tool.call.propose` rule decides who may."""
    approval = state.approvals.get(approval_id)
    if approval is None:
        known = ", ".join(state.approvals) or "none"
        raise ControlError(f"run {state.runId} has no approval {approval_id} (approvals: {known})")
    if approval.status != "expired":
        raise ControlError(f"approval {approval_id} is {approval.status}, not expired: nothing to re-authorize")
    call = state.toolCalls.get(approval.toolCallId)
    if call is None:
        raise ControlError(f"the call {approval.toolCallId} of approval {approval_id} is compacted: "
                           "the agent must propose it again")
    payload = cmd.ProposeToolCallPayload(
        toolCallId=_chain_root(state, call.toolCallId), capabilityId=call.capabilityId, argsHash=call.argsHash,
        argsRef=call.argsRef, target=call.target, action=call.action, risk=call.risk, summary=call.summary,
        turnId=call.turnId, reasoningObjectId=call.reasoningObjectId,
        display=call.display)  # the same display: the new approval shows what the old one did
    return cmd.ProposeToolCall(**_envelope(state, issue), payload=payload)


def _chain_root(state: RunState, call_id: str) -> str:
    """The id a re-authorization chain started from: `<root>-r<n>` while `<root>` is a call of the run."""
    while True:
        root, sep, n = call_id.rpartition("-r")
        if not (sep and n.isdigit() and (root in state.toolCalls or root in state.settledCalls)):
            return call_id
        call_id = root


def find_approval(states: dict[str, RunState], approval_id: str) -> RunState:
    """The run holding `approval_id` (open ones first) when the caller did not name the run."""
    holders = [s for s in states.values() if approval_id in s.approvals]
    if not holders:
        raise ControlError(f"no run has approval {approval_id}; pass --run RUN_ID if it is new")
    open_ = [s for s in holders if s.approvals[approval_id].status == "open"]
    if len(open_ or holders) > 1:
        runs = ", ".join(sorted(s.runId for s in open_ or holders))
        raise ControlError(f"approval {approval_id} exists in several runs ({runs}); pass --run RUN_ID")
    return (open_ or holders)[0]


@dataclass(frozen=True)
class RetryTargets:
    """What `runfacts retry --capability X --since T` would retry: (run, call) pairs, oldest failure
    first, and how many retryable failures it leaves out because their run takes no retry now."""

    calls: tuple[tuple[RunState, ToolCallState], ...]
    skipped: int


def retry_targets(states: Iterable[RunState], capability: str, since: datetime) -> RetryTargets:
    """The failed, retryable, open calls of `capability` that failed at or after `since`, on runs
    that take a retry (running: the decider's rule); the attempt limit is the decider's to judge."""
    found: list[tuple[RunState, ToolCallState]] = []
    skipped = 0
    for state in states:
        for call in state.toolCalls.values():
            if (call.capabilityId != capability or call.execution != "failed" or not call.retryable
                    or call.closedReason is not None or call.finishedAt is None or call.finishedAt < since):
                continue
            if state.status != "running" or state.archived:
                skipped += 1
                continue
            found.append((state, call))
    found.sort(key=lambda pair: (pair[1].finishedAt or since, pair[0].runId, pair[1].toolCallId))
    return RetryTargets(tuple(found), skipped)


def bulk_retry_command(state: RunState, call: ToolCallState, issue: Issue) -> cmd.RetryToolCall:
    """One retry of a bulk retry: no expectedVersion (a run with two such calls changes version after
    the first; the decider judges each call's own state: failed, retryable, attempts, grant)."""
    return retry_command(state, call.toolCallId, issue).model_copy(update={"expectedVersion": None})


@dataclass(frozen=True)
class Outcome:
    """What the run decider made of one command: its events (a rejection is one event)."""

    command: CommandBase
    events: tuple[EventBase, ...]

    @property
    def rejection(self) -> Any:
        """The `command.rejected` payload, or None when the command was accepted."""
        for event in self.events:
            if event.eventType == "command.rejected":
                return event.payload
        return None

    @property
    def accepted(self) -> bool:
        return bool(self.events) and self.rejection is None

    def describe(self) -> str:
        """One line: accepted with event types, or rejected with reason code and detail."""
        rejected = self.rejection
        if rejected is not None:
            detail = f": {rejected.detail}" if rejected.detail else ""
            return f"rejected {self.command.commandType} [{rejected.reasonCode}]{detail}"
        types = ", ".join(e.eventType for e in self.events)
        return f"accepted {self.command.commandType}: {types}"
