"""The eval-trajectory projection: per run, the ordered steps an evaluator scores (pure).

`evolve(view, fact) -> State`, `initial = None`; `trajectory_of(state)` is the record.
A step is one thing the agent did:
a recorded reasoning, the action it proposed from it (capability, target, arguments hash),
the approval outcome, the tool result, the verification outcome, feedback aimed at it and
the budget debited in its turn. Steps are numbered in the order they began.

Attribution rules: a proposal joins the latest step of its turn that has the same
reasoningObjectId and no action yet, else starts a step; approval, execution and
verification events join the step of their toolCallId; feedback joins the step of its
target tool call, reasoning object or turn (the turn's first step), else the run; a budget
debit joins the latest step of its turn, and always counts in the run total.

Graph steps (an agent framework's steps, e.g. the LangGraph bridge's tool-node runs): a
`checkpoint.saved` closes one and holds the trajectory steps begun since the previous
checkpoint (a suffix of the steps: each checkpoint takes all not yet held), with their tool
calls and approvals; a checkpoint that would hold no step opens none (the decider's `final`).
A later approval (or a proposal joining a held step) is added to the graph step of its call.
A checkpoint with the same node as the latest graph step (a re-save of that step) adds to it
instead of opening another. The node `langgraph:<thread>:<id>` gives the checkpoint id.

The trajectory holds references and hashes only: no personal data (summaries, user ids,
comments, actors' subject ids are left out). Format: `FORMAT_VERSION`, documented in
docs/projections.md; the Avro schema is `schemas/avro/projections/Trajectory.v2.avsc`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from runfacts.projections.facts import Fact, ReadSettings
from runfacts.projections.trajectory.model import (
    Action,
    Approval,
    Budget,
    Execution,
    Feedback,
    GraphStep,
    Reasoning,
    RunPart,
    State,
    Step,
    Turn,
    Verification,
)
from runfacts.schemas.binary.readers import Keep

Parts = tuple[RunPart, tuple[Step, ...], Budget]
_new = tuple.__new__  # a NamedTuple from a tuple, without its Python-level __new__
_NO_RUN, _NO_BUDGET = RunPart(), Budget()
Handler = Callable[[State, dict[str, Any], Any], Parts]
initial: State | None = None


def evolve(view: State | None, fact: Fact) -> State:
    """The run's trajectory state after `fact`."""
    event = fact.event
    if event is None:
        event = fact.values  # raises, naming the position
    if view is None:
        view = _new(State, (event["runId"], _NO_RUN, (), _NO_BUDGET, 0, "", 0))
    elif view.runId != event["runId"]:
        raise ValueError(f"trajectory of run {view.runId} fed an event of run {event['runId']} "
                         f"at {fact.where()}")
    handler = HANDLERS.get(event["eventType"])
    if handler is not None:
        run, steps, budget = handler(view, event, event["payload"])
    elif event["eventType"] in IGNORED:
        run, steps, budget = view.run, view.steps, view.budget
    else:
        raise ValueError(f"trajectory has no rule for event type {event['eventType']!r} "
                         f"at {fact.where()}")
    return _new(State, (view.runId, run, steps, budget, view.eventCount + 1, event["eventId"],
                        event["occurredAt"]))


# -- run status ---------------------------------------------------------------------------------

def _run(view: State, run: RunPart) -> Parts:
    return run, view.steps, view.budget


def _created(view: State, event: dict[str, Any], p: dict[str, Any]) -> Parts:
    return _run(view, view.run._replace(goalRef=p["goalRef"], createdAt=event["occurredAt"]))


def _status(status: str, ends: bool = False, outcome: str | None = None) -> Handler:
    def handle(view: State, event: dict[str, Any], p: Any) -> Parts:
        run = view.run
        found = p.get(outcome) if outcome else None
        return _run(view, run._replace(
            status=status, endedAt=event["occurredAt"] if ends else run.endedAt,
            outcome=found if found is not None else run.outcome))

    return handle


def _paused(view: State, event: dict[str, Any], p: dict[str, Any]) -> Parts:
    status = "waiting_for_approval" if p["reason"] == "waiting_for_approval" else "paused"
    return _run(view, view.run._replace(status=status))


def _turn(view: State, event: dict[str, Any], p: dict[str, Any]) -> Parts:
    turn, turns = event["turnId"], view.run.turns
    if turn is None or any(t.turnId == turn for t in turns):
        return view.run, view.steps, view.budget
    return _run(view, view.run._replace(turns=(*turns, Turn(turn, p["turnNumber"]))))


# -- steps ------------------------------------------------------------------------------------

def _new_step(view: State, event: dict[str, Any], **parts: Any) -> Parts:
    turn = event["turnId"]
    number = next((t.turnNumber for t in view.run.turns if t.turnId == turn), None)
    step = Step(len(view.steps) + 1, turn, number, **parts)
    return view.run, (*view.steps, step), view.budget


def _put(view: State, index: int, step: Step) -> Parts:
    steps = view.steps
    return view.run, (*steps[:index], step, *steps[index + 1:]), view.budget


def _find(view: State, test: Callable[[Step], bool]) -> int | None:
    for i in range(len(view.steps) - 1, -1, -1):
        if test(view.steps[i]):
            return i
    return None


def _of_call(view: State, call_id: str) -> int | None:
    steps = view.steps
    for i in range(len(steps) - 1, -1, -1):
        action = steps[i].action
        if action is not None and action.toolCallId == call_id:
            return i
    return None


def _reasoning(view: State, event: dict[str, Any], p: dict[str, Any]) -> Parts:
    reasoning = Reasoning(event["reasoningObjectId"], p["goalRef"], tuple(p["evidenceRefs"]),
                          p["conclusionHash"], p["conclusionRef"])
    return _new_step(view, event, reasoning=reasoning)


def _proposed(view: State, event: dict[str, Any], p: dict[str, Any]) -> Parts:
    action = Action(p["toolCallId"], event["capabilityId"], p["action"], p["target"],
                    p["argsHash"], p["argsRef"], p["risk"], event["occurredAt"])
    rid, turn = event["reasoningObjectId"], event["turnId"]
    index = None if rid is None else _find(
        view, lambda s: s.turnId == turn and s.action is None and s.reasoning is not None
        and s.reasoning.reasoningObjectId == rid)
    if index is None:
        return _new_step(view, event, action=action)
    step = view.steps[index]
    run, steps, budget = _put(view, index, step._replace(action=action))
    if step.graphStep is not None:
        run = _in_graph(run, step.graphStep, call=p["toolCallId"])
    return run, steps, budget


# -- graph steps ------------------------------------------------------------------------------

LANGGRAPH = "langgraph:"


def checkpoint_id(node: str) -> str | None:
    """The framework's checkpoint id a node names: `langgraph:<thread>:<id>` -> id (None: other
    nodes, or the bridge's "none" for a step without one)."""
    if not node.startswith(LANGGRAPH) or node.count(":") < 2:
        return None
    found = node.rsplit(":", 1)[1]
    return None if found in ("", "none") else found


def _checkpoint(view: State, event: dict[str, Any], p: dict[str, Any]) -> Parts:
    run, steps = view.run, view.steps
    start = len(steps)
    while start > 0 and steps[start - 1].graphStep is None:
        start -= 1
    if start == len(steps):  # holds no step: e.g. the decider's "final" checkpoint of a completed run
        return run, steps, view.budget
    graph = run.graphSteps
    again = bool(graph) and graph[-1].node == p["node"]
    number = graph[-1].index if again else len(graph) + 1
    held = tuple(s._replace(graphStep=number) for s in steps[start:])
    calls = tuple(s.action.toolCallId for s in held if s.action is not None)
    approvals = tuple(s.approval.approvalId for s in held
                      if s.approval is not None and s.approval.approvalId is not None)
    indexes = tuple(s.index for s in held)
    if again:
        last = graph[-1]
        graph = (*graph[:-1], last._replace(steps=(*last.steps, *indexes), toolCallIds=(*last.toolCallIds, *calls),
                                            approvalIds=(*last.approvalIds, *approvals)))
    else:
        graph = (*graph, GraphStep(number, p["node"], checkpoint_id(p["node"]), p["stateHash"],
                                   event["occurredAt"], indexes, calls, approvals))
    return run._replace(graphSteps=graph), (*steps[:start], *held), view.budget


def _in_graph(run: RunPart, number: int, call: str | None = None, approval: str | None = None) -> RunPart:
    """The run with a tool call or approval added to graph step `number` (once)."""
    graph = run.graphSteps
    i = number - 1
    found = graph[i]
    if call is not None and call not in found.toolCallIds:
        found = found._replace(toolCallIds=(*found.toolCallIds, call))
    if approval is not None and approval not in found.approvalIds:
        found = found._replace(approvalIds=(*found.approvalIds, approval))
    return run._replace(graphSteps=(*graph[:i], found, *graph[i + 1:]))


def _required(view: State, event: dict[str, Any], p: dict[str, Any]) -> Parts:
    """approval.required: the call's step, and the graph step it ran in."""
    run, steps, budget = _pending(view, event, p)
    index = _of_call(view, p["toolCallId"])
    number = None if index is None else steps[index].graphStep
    if number is not None:
        run = _in_graph(run, number, approval=p["approvalId"])
    return run, steps, budget


def _on_call(update: Callable[[Step, dict[str, Any], dict[str, Any]], Step]) -> Handler:
    """A handler for an event about one tool call: update that call's step (unknown: ignore)."""

    def handle(view: State, event: dict[str, Any], p: dict[str, Any]) -> Parts:
        index = _of_call(view, p["toolCallId"])
        if index is None:
            return view.run, view.steps, view.budget
        return _put(view, index, update(view.steps[index], event, p))

    return handle

def _approval(outcome: str) -> Callable[[Step, dict[str, Any], dict[str, Any]], Step]:
    def update(step: Step, event: dict[str, Any], p: dict[str, Any]) -> Step:
        old = step.approval or Approval(p["approvalId"], outcome)
        if outcome == "pending":
            return step._replace(approval=Approval(p["approvalId"], outcome, p["risk"],
                                                   p["requiredRole"]))
        actor = p.get("actor")
        return step._replace(approval=old._replace(
            outcome=outcome, decidedAt=event["occurredAt"], reason=p.get("reason"),
            decidedByRoles=tuple(actor["roles"]) if actor else old.decidedByRoles))

    return update


def _consumed(step: Step, event: dict[str, Any], p: dict[str, Any]) -> Step:
    old = step.approval or Approval(p["approvalId"], "granted")
    return step._replace(approval=old._replace(consumed=True))


def _authorized(step: Step, event: dict[str, Any], p: dict[str, Any]) -> Step:
    approval = step.approval
    if p["approvalId"] is None:
        approval = Approval(None, "not_required")
    return step._replace(approval=approval, execution=_execution(step, event, "authorized"))


def _execution(step: Step, event: dict[str, Any], status: str, **fields: Any) -> Execution:
    old = step.execution or Execution(status)
    return old._replace(status=status, updatedAt=event["occurredAt"], **fields)


def _exec(status: str, *names: str) -> Callable[[Step, dict[str, Any], dict[str, Any]], Step]:
    def update(step: Step, event: dict[str, Any], p: dict[str, Any]) -> Step:
        fields = {n: p[n] for n in names}
        if "attempt" in p:
            fields["attempts"] = max(p["attempt"], step.execution.attempts if step.execution else 0)
        return step._replace(execution=_execution(step, event, status, **fields))

    return update


_RECONCILED = {"found_completed": "completed", "found_failed": "failed"}


def _reconciled(step: Step, event: dict[str, Any], p: dict[str, Any]) -> Step:
    status = _RECONCILED.get(p["outcome"], "result_unknown")
    extra = {"resultRef": p["resultRef"], "resultHash": p["resultHash"]} \
        if status == "completed" else {}
    return step._replace(execution=_execution(step, event, status, reconciliation=p["outcome"],
                                              **extra))


def _verified(step: Step, event: dict[str, Any], p: dict[str, Any]) -> Step:
    return step._replace(verification=Verification(p["status"], p["evidenceRef"],
                                                    event["occurredAt"]))


def _feedback(view: State, event: dict[str, Any], p: dict[str, Any]) -> Parts:
    targets = [("tool_call", p["targetToolCallId"], lambda s, v: s.action is not None
                and s.action.toolCallId == v),
               ("reasoning", p["targetReasoningObjectId"], lambda s, v: s.reasoning is not None
                and s.reasoning.reasoningObjectId == v),
               ("turn", p["targetTurnId"], lambda s, v: s.turnId == v)]
    for kind, value, test in targets:
        if value is None:
            continue
        item = Feedback(p["feedbackId"], p["rating"], kind, event["occurredAt"])
        index = next((i for i, s in enumerate(view.steps) if test(s, value)), None)
        if index is not None:
            step = view.steps[index]
            return _put(view, index, step._replace(feedback=(*step.feedback, item)))
    item = Feedback(p["feedbackId"], p["rating"], "run", event["occurredAt"])
    return _run(view, view.run._replace(feedback=(*view.run.feedback, item)))


def _debited(view: State, event: dict[str, Any], p: dict[str, Any]) -> Parts:
    amounts = p["amounts"]
    budget = view.budget.plus(amounts)
    turn = event["turnId"]
    index = None if turn is None else _find(view, lambda s: s.turnId == turn)
    if index is None:
        return view.run, view.steps, budget
    step = view.steps[index]
    _, steps, _ = _put(view, index, step._replace(budgetUsed=step.budgetUsed.plus(amounts)))
    return view.run, steps, budget


_pending = _on_call(_approval("pending"))

HANDLERS: dict[str, Handler] = {
    "run.created": _created,
    "run.started": _status("running"),
    "run.paused": _paused,
    "run.resumed": _status("running"),
    "run.needs_review": _status("needs_review", outcome="reason"),
    "run.cancel_requested": _status("cancelling"),
    "run.cancelled": _status("cancelled", ends=True),
    "run.completed": _status("completed", ends=True, outcome="outcomeRef"),
    "run.failed": _status("failed", ends=True, outcome="errorClass"),
    "run.archived": _status("archived"),
    "compensation.started": _status("compensating"),  # the undoing call is a step of its own
    "compensation.resolved": _status("compensating"),  # a person's decision; give_up: run.failed follows
    "run.compensated": _status("compensated", ends=True, outcome="reason"),
    "turn.started": _turn,
    "turn.completed": _turn,
    "reasoning.recorded": _reasoning,
    "tool.call.proposed": _proposed,
    "approval.required": _required,
    "approval.granted": _on_call(_approval("granted")),
    "approval.rejected": _on_call(_approval("rejected")),
    "approval.expired": _on_call(_approval("expired")),
    "approval.invalidated": _on_call(_approval("invalidated")),
    "approval.consumed": _on_call(_consumed),
    "tool.call.authorized": _on_call(_authorized),
    "tool.call.dispatching": _on_call(_exec("dispatching")),
    "tool.call.accepted": _on_call(_exec("accepted")),
    "tool.call.completed": _on_call(_exec("completed", "resultRef", "resultHash")),
    "tool.call.failed": _on_call(_exec("failed", "errorClass", "retryable")),
    "tool.call.result_unknown": _on_call(_exec("result_unknown")),
    "tool.call.reconciled": _on_call(_reconciled),
    "tool.call.retry_requested": _on_call(_exec("retry_requested")),
    "verification.updated": _on_call(_verified),
    "feedback.recorded": _feedback,
    "budget.debited": _debited,
    "checkpoint.saved": _checkpoint,
}
IGNORED = frozenset({"run.migrated", "budget.exceeded", "progress.updated",
                     "command.rejected", "tool.call.reconciliation_requested",
                     # run-end hygiene and memory: facts of the run's end and of its review, not steps
                     "grant.revoked", "checkpoint.archived", "memory.proposed", "memory.confirmed",
                     "memory.rejected", "memory.revoked", "memory.expired",
                     # an erasure (runId erasure-<ref>) and a drain (runId drain-<digest>-<n>) are no run's step
                     "subject.erased", "version.drained",
                     # child runs (docs/decisions/0012-child-runs.md): a child's steps are in its own
                     # trajectory; the parent's reservation, link, reports and evidence ledger are no step
                     "child.requested", "child.reported", "run.parent_linked", "evidence.appended",
                     "evidence.merged", "evidence.conflict_detected",
                     # a compensation's plan: what would undo a call, not a step (its undoing is one)
                     "compensation.planned",
                     # an operator's pause of a capability (runId tools-<capability>) and a call it
                     # holds: the fleet's operations, not the agent's steps (the call's later outcome is)
                     "tool.paused", "tool.resumed", "tool.call.held"})
"""Event types that do not change a trajectory (named, so a new type must be classified)."""


def _fields(*names: str) -> Keep:
    return dict.fromkeys(names)


_CALL = ("toolCallId", "attempt")
_TURN = frozenset({"turnId"})
_DECIDED: Keep = {"approvalId": None, "toolCallId": None, "actor": {"roles": None}}
READS = ReadSettings(
    payloads={
        "run.created": _fields("goalRef"), "run.paused": _fields("reason"),
        "run.needs_review": _fields("reason"), "run.completed": _fields("outcomeRef"),
        "run.failed": _fields("errorClass"), "run.compensated": _fields("reason"),
        "turn.started": _fields("turnNumber"), "turn.completed": _fields("turnNumber"),
        "reasoning.recorded": _fields("goalRef", "evidenceRefs", "conclusionHash",
                                      "conclusionRef"),
        "tool.call.proposed": _fields("toolCallId", "action", "target", "argsHash", "argsRef",
                                      "risk"),
        "approval.required": _fields("approvalId", "toolCallId", "risk", "requiredRole"),
        "approval.granted": _DECIDED, "approval.rejected": _DECIDED,
        "approval.expired": _fields("approvalId", "toolCallId"),
        "approval.invalidated": _fields("approvalId", "toolCallId", "reason"),
        "approval.consumed": _fields("approvalId", "toolCallId"),
        "tool.call.authorized": _fields("toolCallId", "approvalId"),
        "tool.call.dispatching": _fields(*_CALL), "tool.call.accepted": _fields(*_CALL),
        "tool.call.completed": _fields(*_CALL, "resultRef", "resultHash"),
        "tool.call.failed": _fields(*_CALL, "errorClass", "retryable"),
        "tool.call.result_unknown": _fields(*_CALL),
        "tool.call.reconciled": _fields("toolCallId", "outcome", "resultRef", "resultHash"),
        "tool.call.retry_requested": _fields("toolCallId"),
        "verification.updated": _fields("toolCallId", "status", "evidenceRef"),
        "feedback.recorded": _fields("feedbackId", "rating", "targetTurnId", "targetToolCallId",
                                     "targetReasoningObjectId"),
        "budget.debited": _fields("amounts"),
        "checkpoint.saved": _fields("node", "stateHash"),
    },
    envelope=frozenset({"occurredAt"}),
    envelope_of={"turn.started": _TURN, "turn.completed": _TURN, "budget.debited": _TURN,
                 "reasoning.recorded": _TURN | {"reasoningObjectId"},
                 "tool.call.proposed": _TURN | {"reasoningObjectId", "capabilityId"}})
"""What the trajectory decodes: these payload fields of these types (envelope only for the
rest), occurredAt and the ids every fact has, and the envelope ids the rules above use."""

