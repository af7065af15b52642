"""LangGraph human-in-the-loop on runfacts: a tool node in the shape of LangChain's
`HumanInTheLoopMiddleware(interrupt_on=...)` whose gated tool calls are runfacts proposals.

    tools = RunfactsToolNode(rf, interrupt_on={"refund": Gate("payments.refund", target="orderId")},
                             tools=[lookup_order])
    builder.add_node("tools", tools)         # the graph keeps its own checkpointer

For the tool calls of the last AI message, in order (LangGraph re-runs all of it on resume):
1. a gated call (its tool name in `interrupt_on`) is proposed with `run.propose`; the call id is
   derived from capability, target and arguments, so a re-run returns the same call;
2. the graph step is recorded as the run's checkpoint (`checkpoint.save`, node
   `langgraph:<thread>:<checkpoint id>`), so audit and trajectories link to it;
3. while runfacts holds an open approval for a call, `interrupt({approvalId, asks, expiresAt,
   argsHash, ...})`;
4. on `Command(resume=...)` the value is not trusted: only the decision runfacts recorded counts.
   A resume naming `approvalId` and `decision` is submitted through `rf.decide` when the node's
   `approver` hook authenticates someone (the decider checks role, expiry, arguments); a value
   claiming a decision runfacts never recorded interrupts again with `refused` saying why;
5. the result comes from the dispatcher (`call.result()`: idempotency key, reconciliation after a
   lost response) as the ToolMessage; a rejection or expiry becomes an error ToolMessage.
Other tool calls run locally, as LangGraph's ToolNode runs them.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from importlib import metadata
from typing import Any

from runfacts.integrations.errors import IncompatibleFramework

SUPPORTED = ((1, 2), (1, 3))
"""The langgraph versions this bridge is tested with: >= 1.2, < 1.3 (the extra pins the same)."""


def check_version(found: str) -> None:
    """Raise IncompatibleFramework (the bridges' one error for it) unless `found` is in SUPPORTED."""
    numbers = tuple(int(n) for n in re.findall(r"\d+", found)[:2])
    if len(numbers) < 2 or not SUPPORTED[0] <= numbers < SUPPORTED[1]:
        low, high = (".".join(map(str, v)) for v in SUPPORTED)
        raise IncompatibleFramework("langgraph", found or None, f">={low},<{high}", "langgraph")


def _installed() -> str:
    try:
        return metadata.version("langgraph")
    except metadata.PackageNotFoundError:
        return ""


check_version(_installed())

from langchain_core.messages import AIMessage, ToolMessage  # noqa: E402
from langchain_core.runnables import RunnableConfig  # noqa: E402
from langchain_core.tools import BaseTool  # noqa: E402
from langgraph.types import interrupt  # noqa: E402

from runfacts.client import (  # noqa: E402
    Approval,
    ClientError,
    CommandRejected,
    Run,
    Runfacts,
    ToolCall,
    ToolFailed,
    WaitTimeout,
    outcomes,
)
from runfacts.integrations import facts  # noqa: E402
from runfacts.schemas import commands as cmd  # noqa: E402
from runfacts.schemas import events as ev  # noqa: E402
from runfacts.schemas.common import Actor, RunVersions  # noqa: E402


@dataclass(frozen=True)
class Gate:
    """A tool whose calls go through runfacts: the capability it is, and where its target is."""

    capability: str
    target: str | Callable[[Mapping[str, Any]], str]
    """The argument holding the call's target (e.g. "orderId"), or a function of the arguments."""
    summary: Callable[[Mapping[str, Any]], str] | None = None

    def target_of(self, args: Mapping[str, Any]) -> str:
        return str(self.target(args) if callable(self.target) else args[self.target])


def claimed(resume: Any) -> tuple[str | None, str | None]:
    """(approvalId, decision) a resume value claims: `{"approvalId", "decision"}`, a HITL-style
    `{"decisions": [{"type": "approve"}]}` or a bare "approve" / "reject" (no approval named)."""
    if isinstance(resume, str):
        return None, resume
    if not isinstance(resume, Mapping):
        return None, None
    decisions = resume.get("decisions")
    first = decisions[0] if isinstance(decisions, Sequence) and decisions else {}
    decision = resume.get("decision") or (first.get("type") if isinstance(first, Mapping) else None)
    approval = resume.get("approvalId") or (first.get("approvalId") if isinstance(first, Mapping) else None)
    return approval, decision


def step_ref(config: RunnableConfig) -> str:
    """The graph step a node runs in: `langgraph:<thread>:<root checkpoint id>`."""
    conf = config.get("configurable", {})
    checkpoint = (conf.get("checkpoint_map") or {}).get("", conf.get("checkpoint_id")) or "none"
    return f"langgraph:{conf.get('thread_id', 'none')}:{checkpoint}"


class RunfactsToolNode:
    """A LangGraph node executing the last AI message's tool calls, gated ones through runfacts."""

    def __init__(self, rf: Runfacts, *, interrupt_on: Mapping[str, Gate], tools: Sequence[BaseTool] = (),
                 run_id: Callable[[RunnableConfig], str] | None = None,
                 approver: Callable[[RunnableConfig], str | Actor | None] | None = None,
                 settle_s: float = 5.0, result_timeout_s: float = 600.0) -> None:
        self.rf, self.gates, self.tools = rf, dict(interrupt_on), {t.name: t for t in tools}
        self.run_id = run_id or (lambda config: config["configurable"]["thread_id"])
        self.approver, self.settle_s, self.result_timeout_s = approver, settle_s, result_timeout_s

    def __call__(self, state: Mapping[str, Any], config: RunnableConfig) -> dict[str, Any]:
        message = state["messages"][-1]
        if not isinstance(message, AIMessage):
            raise TypeError(f"RunfactsToolNode needs an AIMessage last in state['messages'], got {type(message)}")
        run = self.rf.run(self.run_id(config))
        gated = {str(tc["id"]): self._propose(run, tc) for tc in message.tool_calls if tc["name"] in self.gates}
        if gated:
            self._checkpoint(run, config, message)
            self._await_decisions(run, gated, config)
        out = []
        for tc in message.tool_calls:
            call = gated.get(str(tc["id"])) if tc["name"] in self.gates else None
            out.append(self._local(tc) if call is None else self._outcome(tc, call))
        return {"messages": out}

    def _propose(self, run: Run, tc: Mapping[str, Any]) -> ToolCall:
        gate, args = self.gates[tc["name"]], tc["args"]
        summary = gate.summary(args) if gate.summary else None
        return run.propose(gate.capability, args, target=gate.target_of(args), summary=summary)

    def _checkpoint(self, run: Run, config: RunnableConfig, message: AIMessage) -> None:
        """Record the graph step as the run's checkpoint, once per step."""
        node = step_ref(config)
        saved = [e for e in run.journal.entries if e.event_type == "checkpoint.saved"]
        if saved and saved[-1].event.payload.node == node:  # type: ignore[attr-defined]
            return
        calls = json.dumps(message.tool_calls, sort_keys=True, default=str)
        self.rf.command(run, cmd.SaveCheckpoint, {"node": node, "stateHash": hashlib.sha256(calls.encode())
                                                  .hexdigest(), "versions": run_versions(run)})

    def _await_decisions(self, run: Run, gated: Mapping[str, ToolCall], config: RunnableConfig) -> None:
        """Interrupt while a call's approval is open; each resume is checked against runfacts."""
        refused: str | None = None
        while (waiting := self._undecided(run, gated.values())) is not None:
            resume = interrupt(self._request(run, waiting, refused))
            refused = self._settle(run, waiting, resume, config)

    def _undecided(self, run: Run, calls: Any) -> ToolCall | None:
        for call in calls:
            if outcomes.call_decision(run.id, run.journal.entries, call.id) is None and call.approval_id:
                return call
        return None

    def _request(self, run: Run, call: ToolCall, refused: str | None) -> dict[str, Any]:
        """What the interrupt surfaces: the approval as runfacts holds it (never a decision)."""
        required = outcomes.pending_approval(run.journal.entries, call.id)
        assert required is not None
        p = required.payload
        return {"runId": run.id, "toolCallId": call.id, "approvalId": p.approvalId, "asks": _asks(run, call, p.risk),
                "expiresAt": p.expiresAt.isoformat(), "argsHash": p.argsHash, "requiredRole": p.requiredRole,
                "capability": call.capability, **({"refused": refused} if refused else {})}

    def _settle(self, run: Run, call: ToolCall, resume: Any, config: RunnableConfig) -> str | None:
        """None once runfacts recorded the call's decision; else why the resume value was refused."""
        approval_id, decision = claimed(resume)
        note = ""
        if approval_id == call.approval_id and decision in ("approve", "reject") and self.approver is not None:
            who = self.approver(config)
            if who is not None:
                note = self._submit(run, call, decision, who)
        try:
            call.decision(timeout=self.settle_s)
        except WaitTimeout:
            return (f"resume value {resume!r} is not a decision: runfacts recorded none for approval "
                    f"{call.approval_id}{note}; decide it through runfacts (rf.decide) and resume again")
        except ClientError:
            return None  # rejected, expired, ...: `_outcome` reports it
        return None

    def _submit(self, run: Run, call: ToolCall, decision: str, who: str | Actor) -> str:
        try:
            self.rf.decide(_approval(run, call), decision, approver=who)
        except CommandRejected as exc:
            return "" if exc.reason == "approval_already_decided" else f" (the decision was refused: {exc.reason})"
        return ""

    def _outcome(self, tc: Mapping[str, Any], call: ToolCall) -> ToolMessage:
        try:
            value = call.result(timeout=self.result_timeout_s)
        except WaitTimeout:
            raise
        except ToolFailed as exc:  # ran once, failed: the model sees it; the same call never runs again
            return ToolMessage(content=facts.failure_text(tc["name"], exc), tool_call_id=tc["id"], name=tc["name"],
                               status="error", artifact={"runfacts": "ToolFailed", "toolCallId": call.id,
                                                         "errorClass": exc.error_class, "retryable": exc.retryable})
        except ClientError as exc:
            return ToolMessage(content=f"not done: {exc}", tool_call_id=tc["id"], name=tc["name"], status="error",
                               artifact={"runfacts": type(exc).__name__, "toolCallId": call.id})
        return ToolMessage(content=json.dumps(value, sort_keys=True), tool_call_id=tc["id"], name=tc["name"],
                           artifact={"runfacts": "completed", "toolCallId": call.id})

    def _local(self, tc: Mapping[str, Any]) -> Any:
        tool = self.tools.get(tc["name"])
        if tool is None:
            known = sorted([*self.tools, *self.gates])
            return ToolMessage(content=f"unknown tool {tc['name']!r}; known: {', '.join(known)}",
                               tool_call_id=tc["id"], name=tc["name"], status="error")
        return tool.invoke({**tc, "type": "tool_call"})


def run_versions(run: Run) -> RunVersions:
    """The versions the run is on (created, checkpointed or migrated to), from its facts: a
    checkpoint never moves a run to other versions (the decider checks them on resume)."""
    found: RunVersions | None = None
    for entry in run.journal.entries:
        if entry.event_type in ("run.created", "checkpoint.saved"):
            found = entry.event.payload.versions  # type: ignore[attr-defined]
        elif entry.event_type == "run.migrated":
            found = entry.event.payload.toVersions  # type: ignore[attr-defined]
    if found is None:
        raise ClientError(run.id, "no run.created fact in the run's journal; start the run with rf.start_run")
    return found


def _asks(run: Run, call: ToolCall, risk: str) -> str:
    """The approval in plain words, as `rf.approvals()` and the user view's banner say it."""
    proposed = next((e.event for e in run.journal.entries
                     if e.event_type == "tool.call.proposed" and e.tool_call_id == call.id), None)
    if proposed is None:
        return f"tool call {call.id} ({risk} risk)"
    p = proposed.payload
    return f"{p.action} on {p.target} ({risk} risk)"  # type: ignore[attr-defined]


def _approval(run: Run, call: ToolCall) -> Approval:
    """The call's open approval as `rf.decide` takes it, from the run's facts."""
    required = outcomes.pending_approval(run.journal.entries, call.id)
    assert required is not None
    p = required.payload
    created = next(e.event for e in run.journal.entries if isinstance(e.event, ev.RunCreated))
    return Approval(run.id, p.approvalId, call.id, _asks(run, call, p.risk), p.risk, p.requiredRole, p.expiresAt,
                    p.argsHash, created.payload.tenant, created.payload.actor.subjectId)


__all__ = ["SUPPORTED", "Gate", "RunfactsToolNode", "check_version", "claimed", "run_versions",
           "step_ref"]
