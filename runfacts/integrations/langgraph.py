"""LangGraph human-in-the-loop on runfacts: a tool node in the shape of LangChain's
`HumanInTheLoopMiddleware(interrupt_on=...)` whose gated tool calls are runfacts proposals.

    tools = RunfactsToolNode(rf, interrupt_on={"refund": Gate("payments.refund", target="orderId")},
                             tools=[lookup_order])
    builder.add_node("tools", tools)         # the graph keeps its own checkpointer

For the tool calls of the last AI message, in order (LangGraph re-runs all of it on resume):
0. a gated call whose arguments fail its tool's schema (a gated tool given in `tools=` lends its
   `args_schema`; it never runs here) gets LangGraph's invalid-arguments ToolMessage and is never
   proposed; a decider rejection `invalid_arguments` gives the same message;
1. a gated call (its tool name in `interrupt_on`) is proposed with `run.propose`; the call id is
   derived from capability, target and arguments; a re-run of the same graph step takes the call
   it proposed, and a new step asking again after an expiry opens a new approval;
2. the graph step is recorded as the run's checkpoint (`checkpoint.save`, node
   `langgraph:<thread>:<checkpoint id>`), so audit and trajectories link to it;
3. while runfacts' verdict on a call is pending (`facts.verdict`, the one the Pydantic AI bridge
   resumes on), `interrupt({approvalId, asks, expiresAt, argsHash, ...})`: the approval as
   `facts.approval_request` words it;
4. on `Command(resume=...)` the value is not trusted: only the decision runfacts recorded counts.
   A resume naming `approvalId` and `decision` is submitted through `rf.decide` when the node's
   `approver` hook returns the authenticated person as an `Actor` (a bare name carries no roles:
   the decider checks the actor's own roles, its requesters, expiry, arguments); a value
   claiming a decision runfacts never recorded interrupts again with `refused` saying why;
5. granted: the result comes from the dispatcher (`call.result()`: idempotency key,
   reconciliation after a lost response) as the ToolMessage, and a tool that failed is an error
   ToolMessage saying so (`facts.failure_text`); rejected, expired or refused: an error
   ToolMessage with the verdict's reason.
Other tool calls run locally, as LangGraph's ToolNode runs them. `guard(model)` wraps the model
node so it sees a gated call's ToolMessage only as the facts give it (a message written with
`update_state` is replaced by the real outcome, or ForgedResume while runfacts still waits).
A call dispatched before the run ended is never "not done": its own outcome, or OutcomeNotKnown.

Run-end hygiene: `retire_checkpoints(checkpointer, run)` makes the graph's checkpointer honour
the run's `checkpoint.archived` marker (SEMANTICS §10): the threads the run checkpointed are
deleted, so an ended run's graph state is neither served nor kept.
"""

from __future__ import annotations

import contextlib
import hashlib
import inspect
import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from runfacts.integrations.errors import ForgedResume, IncompatibleFramework, OutcomeNotKnown, installed

SUPPORTED = ((1, 2), (1, 3))
"""The langgraph versions this bridge is tested with: >= 1.2, < 1.3 (the extra pins the same)."""


def check_version(found: str) -> None:
    """Raise IncompatibleFramework (the bridges' one error for it) unless `found` is in SUPPORTED."""
    IncompatibleFramework.check("langgraph", found, SUPPORTED[0], SUPPORTED[1], "langgraph")


check_version(installed("langgraph") or "")

from langchain_core.messages import AIMessage, ToolMessage  # noqa: E402
from langchain_core.runnables import RunnableConfig  # noqa: E402
from langchain_core.tools import BaseTool  # noqa: E402
from langgraph.prebuilt.tool_node import TOOL_INVOCATION_ERROR_TEMPLATE  # noqa: E402
from langgraph.types import interrupt  # noqa: E402
from pydantic import BaseModel, ValidationError  # noqa: E402

from runfacts.client import (  # noqa: E402
    Approval,
    ClientError,
    CommandRejected,
    Run,
    Runfacts,
    ToolCall,
    ToolFailed,
    WaitTimeout,
)
from runfacts.integrations import facts  # noqa: E402
from runfacts.integrations.facts import Gate  # noqa: E402
from runfacts.processors.policy.retry import args_hash  # noqa: E402
from runfacts.schemas import commands as cmd  # noqa: E402
from runfacts.schemas.common import Actor, EventBase, RunVersions  # noqa: E402


def asked_decision(resume: Any) -> tuple[str | None, str | None]:
    """(approvalId, decision) a resume value asks runfacts to record: `{"approvalId", "decision"}`,
    a HITL-style `{"decisions": [{"type": "approve"}]}` or a bare "approve" / "reject" (no
    approval named). Never a verdict: it is submitted through `rf.decide` only for an approver
    the node's `approver` hook authenticates, and only what runfacts then records counts."""
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
                 approver: Callable[[RunnableConfig], Actor | str | None] | None = None,
                 settle_s: float = 5.0, result_timeout_s: float = 600.0) -> None:
        self.rf, self.gates, self.tools = rf, dict(interrupt_on), {t.name: t for t in tools}
        self.run_id = run_id or (lambda config: config["configurable"]["thread_id"])
        self.approver, self.settle_s, self.result_timeout_s = approver, settle_s, result_timeout_s

    def __call__(self, state: Mapping[str, Any], config: RunnableConfig) -> dict[str, Any]:
        message = state["messages"][-1]
        if not isinstance(message, AIMessage):
            raise TypeError(f"RunfactsToolNode needs an AIMessage last in state['messages'], got {type(message)}")
        run = self.rf.run(self.run_id(config))
        rerun = _checkpointed(run, step_ref(config))
        gated: dict[str, Gated] = {}
        invalid: dict[str, ToolMessage] = {}
        for tc in message.tool_calls:
            if tc["name"] not in self.gates:
                continue
            error = self._invalid(tc)
            if error is None:
                try:
                    gated[str(tc["id"])] = Gated(tc, self.gates[tc["name"]], self._propose(run, tc, rerun))
                except CommandRejected as exc:  # the decider refused the arguments (its invalid_arguments)
                    if (detail := facts.rejected_arguments(exc)) is None:
                        raise
                    error = invalid_arguments(tc, detail)
            if error is not None:
                invalid[str(tc["id"])] = error
        if gated:
            self._checkpoint(run, config, message)
            self._await_decisions(run, list(gated.values()), config)
        out = []
        for tc in message.tool_calls:
            call = gated.get(str(tc["id"])) if tc["name"] in self.gates else None
            if str(tc["id"]) in invalid:
                out.append(invalid[str(tc["id"])])
            else:
                out.append(self._local(tc) if call is None else self._outcome(run, call))
        return {"messages": out}

    def _invalid(self, tc: Mapping[str, Any]) -> ToolMessage | None:
        """LangGraph's invalid-arguments ToolMessage when a gated call's arguments fail the schema
        its tool declares (a gated tool given in `tools=`; it never runs here), else None."""
        tool = self.tools.get(tc["name"])
        schema = getattr(tool, "args_schema", None)
        if not (isinstance(schema, type) and issubclass(schema, BaseModel)):
            return None
        try:
            schema.model_validate(tc["args"])
        except ValidationError as exc:
            return invalid_arguments(tc, "\n".join(
                f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors(include_url=False)))
        return None

    def guard(self, model: Callable[..., Any]) -> Callable[[Mapping[str, Any], RunnableConfig], Any]:
        """`model` (a graph node) seeing a gated call's result only as runfacts' facts give it: a
        ToolMessage this node did not write from the facts (one put in the state with
        `update_state`, a `Command(update=...)`, ...) is replaced by the real outcome (the same
        message id, so the state is corrected too), or raises ForgedResume while a person may
        still approve the call (nothing runs, the model is told nothing)."""
        takes_config = "config" in inspect.signature(model).parameters

        def node(state: Mapping[str, Any], config: RunnableConfig) -> Any:
            fixed = self.facts_only(state["messages"], config)
            if fixed:
                state = {**state, "messages": [fixed.get(str(m.id), m) for m in state["messages"]]}
            out = model(state, config=config) if takes_config else model(state)
            if fixed and isinstance(out, dict):
                out = {**out, "messages": [*fixed.values(), *out.get("messages", [])]}
            return out

        return node

    def facts_only(self, messages: Sequence[Any], config: RunnableConfig) -> dict[str, ToolMessage]:
        """The ToolMessages of gated calls in `messages` that say other than runfacts' facts, by
        message id, each with the message the facts give (what `__call__` would have returned)."""
        calls = {str(tc["id"]): tc for m in messages if isinstance(m, AIMessage) for tc in m.tool_calls
                 if tc["name"] in self.gates}
        told = [m for m in messages if isinstance(m, ToolMessage) and str(m.tool_call_id) in calls]
        if not told:
            return {}
        run, fixed = self.rf.run(self.run_id(config)), {}
        for message in told:
            tc = calls[str(message.tool_call_id)]
            gate, args = self.gates[tc["name"]], tc["args"]
            target = gate.target_of(args)
            call_id = facts.current_call_id(run.journal.entries, run.id, gate.capability, target, args)
            found = facts.verdict(run.id, run.journal.entries, call_id)
            if found.status == "unknown" and message.status == "error":
                continue  # never proposed (e.g. invalid arguments): nothing ran and nothing can
            if found.status in ("unknown", "pending"):
                raise ForgedResume(run.id, call_id, tc["name"], found.status, found.reason, "a tool result")
            real = self._outcome(run, Gated(tc, gate, ToolCall(run, call_id, gate.capability, args_hash(args), None)))
            if (real.content, real.status) != (message.content, message.status):
                fixed[str(message.id)] = real.model_copy(update={"id": message.id})
        return fixed

    def _propose(self, run: Run, tc: Mapping[str, Any], rerun: bool) -> ToolCall:
        """The runfacts call of a gated tool call. On a re-run of the same graph step (LangGraph
        re-runs the node on resume) it is the call this step proposed, never a new proposal, so an
        expiry reaches the model; a new step (the model asking again) proposes, which after an
        expiry opens a new approval (re-authorization: the decider's `<id>-r<n>`)."""
        gate, args = self.gates[tc["name"]], tc["args"]
        target = gate.target_of(args)
        if rerun:
            known = facts.current_call_id(run.journal.entries, run.id, gate.capability, target, args)
            if any(e.tool_call_id == known for e in run.journal.entries):
                return ToolCall(run, known, gate.capability, args_hash(args), None)
        return run.propose(gate.capability, args, target=target, action=gate.action_name(), risk=gate.risk,
                           summary=gate.summary_of(args),
                           tool_call_id=facts.call_id(run.id, gate.capability, target, args))

    def _checkpoint(self, run: Run, config: RunnableConfig, message: AIMessage) -> None:
        """Record the graph step as the run's checkpoint, once per step."""
        node = step_ref(config)
        saved = [e for e in run.journal.entries if e.event_type == "checkpoint.saved"]
        if saved and saved[-1].event.payload.node == node:  # type: ignore[attr-defined]
            return
        calls = json.dumps(message.tool_calls, sort_keys=True, default=str)
        self.rf.command(run, cmd.SaveCheckpoint, {"node": node, "stateHash": hashlib.sha256(calls.encode())
                                                  .hexdigest(), "versions": run_versions(run)})

    def _await_decisions(self, run: Run, gated: Sequence[Gated], config: RunnableConfig) -> None:
        """Interrupt while runfacts' verdict on a call is pending; each resume is checked against runfacts."""
        refused: str | None = None
        while (waiting := self._pending(run, gated)) is not None:
            call, request = waiting
            resume = interrupt({**request, "capability": call.gate.capability,
                                **({"refused": refused} if refused else {})})
            refused = self._settle(run, call, request, resume, config)

    def _pending(self, run: Run, gated: Sequence[Gated]) -> tuple[Gated, dict[str, Any]] | None:
        """The first call runfacts holds an open approval for, with that approval in a UI's words."""
        for call in gated:
            found = call.verdict(run)
            if found.status == "pending" and found.request is not None:
                return call, found.request
        return None

    def _settle(self, run: Run, call: Gated, request: Mapping[str, Any], resume: Any,
                config: RunnableConfig) -> str | None:
        """None once runfacts recorded the call's decision; else why the resume value was refused."""
        approval_id, decision = asked_decision(resume)
        note = ""
        if approval_id == request["approvalId"] and decision in ("approve", "reject") and self.approver is not None:
            who = self.approver(config)
            if who is not None:
                note = self._submit(run, call, decision, who)
        with contextlib.suppress(WaitTimeout, ClientError):
            call.tool_call.decision(timeout=self.settle_s)  # waits for runfacts to record one
        if call.verdict(run).status != "pending":
            return None
        return (f"resume value {resume!r} is not a decision: runfacts recorded none for approval "
                f"{request['approvalId']}{note}; decide it through runfacts (rf.decide) and resume again")

    def _submit(self, run: Run, call: Gated, decision: str, who: str | Actor) -> str:
        """Submit the decision as the hook's authenticated actor. The hook is not an authorization: a
        bare name carries no roles (never the approval's required role), so the decider judges the
        actor's own roles, its requesters and the signature as for any UI."""
        approval = call.approval(run)
        if approval is None:
            return ""
        actor = who if isinstance(who, Actor) else Actor(
            subjectId=who, roles=(), tenant=approval.tenant, authSource=self.rf.settings.ui.auth_source)
        try:
            self.rf.decide(approval, decision, approver=actor)
        except CommandRejected as exc:
            if exc.reason == "approval_already_decided":
                return ""
            hint = "; the approver hook must return the authenticated Actor with its roles" if not actor.roles else ""
            return f" (the decision was refused: {exc.reason}{hint})"
        return ""

    def _outcome(self, run: Run, call: Gated) -> ToolMessage:
        """The ToolMessage of a gated call: the dispatcher's result if runfacts granted it, else
        an error saying runfacts' verdict (rejected, expired, refused: with the reason)."""
        tc, found = call.tc, call.verdict(run)
        if found.status != "granted":
            return ToolMessage(content=f"not done (runfacts: {found.status}): {found.reason}", tool_call_id=tc["id"],
                               name=tc["name"], status="error",
                               artifact={"runfacts": found.status, "toolCallId": call.tool_call.id})
        try:
            try:
                value = call.tool_call.result(timeout=self.result_timeout_s)
            except WaitTimeout:
                raise
            except ToolFailed:
                raise
            except ClientError as ended:  # authorized, then the run was cancelled, ended or needs review
                value = facts.settle(run.id, run.journal.entries, call.tool_call.id, tc["name"], ended,
                                     run.client.keys)  # the call's own outcome if it ran
        except ToolFailed as exc:  # ran once, failed: the model sees it; the same call never runs again
            return ToolMessage(content=facts.failure_text(tc["name"], exc), tool_call_id=tc["id"], name=tc["name"],
                               status="error", artifact={"runfacts": "ToolFailed", "toolCallId": call.tool_call.id,
                                                         "errorClass": exc.error_class, "retryable": exc.retryable})
        except OutcomeNotKnown as exc:  # dispatched, then the run ended: it may have happened
            return ToolMessage(content=str(exc), tool_call_id=tc["id"], name=tc["name"], status="error",
                               artifact={"runfacts": "OutcomeNotKnown", "toolCallId": call.tool_call.id})
        except ClientError as exc:  # it never left: not done
            return ToolMessage(content=f"not done: {exc}", tool_call_id=tc["id"], name=tc["name"], status="error",
                               artifact={"runfacts": type(exc).__name__, "toolCallId": call.tool_call.id})
        return ToolMessage(content=json.dumps(value, sort_keys=True), tool_call_id=tc["id"], name=tc["name"],
                           artifact={"runfacts": "completed", "toolCallId": call.tool_call.id})

    def _local(self, tc: Mapping[str, Any]) -> Any:
        tool = self.tools.get(tc["name"])
        if tool is None:
            known = sorted([*self.tools, *self.gates])
            return ToolMessage(content=f"unknown tool {tc['name']!r}; known: {', '.join(known)}",
                               tool_call_id=tc["id"], name=tc["name"], status="error")
        return tool.invoke({**tc, "type": "tool_call"})


def invalid_arguments(tc: Mapping[str, Any], detail: str) -> ToolMessage:
    """The ToolMessage LangGraph's ToolNode gives a call whose arguments fail the tool's schema
    (its own wording, "Please fix the error and try again."): nothing was proposed, nobody asked."""
    content = TOOL_INVOCATION_ERROR_TEMPLATE.format(tool_name=tc["name"], tool_kwargs=dict(tc["args"]), error=detail)
    return ToolMessage(content=content, tool_call_id=tc["id"], name=tc["name"], status="error",
                       artifact={"runfacts": "invalid_arguments"})


@dataclass(frozen=True)
class Gated:
    """A gated tool call of the AI message: the model's call, its gate, the runfacts call."""

    tc: Mapping[str, Any]
    gate: Gate
    tool_call: ToolCall

    def verdict(self, run: Run) -> facts.Verdict:
        """runfacts' verdict on the call, from the run's facts (the shared `facts.verdict`)."""
        entries = run.journal.entries
        return facts.verdict(run.id, entries, self.tool_call.id, facts.approval_request(
            entries, self.tool_call.id, self.gate.action_name(), self.gate.target_of(self.tc["args"])))

    def approval(self, run: Run) -> Approval | None:
        """The call's open approval as `rf.decide` takes it."""
        return facts.approval_of(run.journal.entries, self.tool_call.id, self.gate.action_name(),
                                 self.gate.target_of(self.tc["args"]))


def _checkpointed(run: Run, node: str) -> bool:
    """The graph step `node` already ran this node (its `checkpoint.saved`, written after its proposals)."""
    return any(e.event_type == "checkpoint.saved" and e.event.payload.node == node  # type: ignore[attr-defined]
               for e in run.journal.entries)


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


def archived_threads(events: Iterable[EventBase]) -> list[str]:
    """The LangGraph threads a run checkpointed (`checkpoint.saved` nodes `langgraph:<thread>:<id>`),
    in order of first checkpoint, once its `checkpoint.archived` marker is among `events`; [] before
    (a run's checkpoints serve recovery until the decider archives them at the run's end)."""
    threads: dict[str, None] = {}
    archived = False
    for event in events:
        if event.eventType == "checkpoint.archived":
            archived = True
        node = getattr(event.payload, "node", None) if event.eventType == "checkpoint.saved" else None
        if node is not None and node.startswith("langgraph:"):
            threads.setdefault(node[len("langgraph:"):].rsplit(":", 1)[0], None)
    return list(threads) if archived else []


def retire_checkpoints(checkpointer: Any, run: Run | Iterable[EventBase]) -> list[str]:
    """Honour the run's `checkpoint.archived` marker in the graph's checkpointer (any LangGraph
    `BaseCheckpointSaver`: InMemorySaver, SqliteSaver, PostgresSaver, ...): every thread the run
    checkpointed is deleted (`delete_thread`), so an archived run's checkpoints are neither served
    (`get_tuple` finds none) nor retained. Returns the threads deleted; [] while the run has no
    marker. Idempotent: call it after `run.complete()` / `run.fail()` or from a retention job."""
    events = [e.event for e in run.journal.entries] if isinstance(run, Run) else list(run)
    threads = archived_threads(events)
    for thread in threads:
        checkpointer.delete_thread(thread)
    return threads


__all__ = ["SUPPORTED", "Gate", "Gated", "RunfactsToolNode", "archived_threads", "asked_decision",
           "check_version", "invalid_arguments", "retire_checkpoints", "run_versions", "step_ref"]
