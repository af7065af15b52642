"""The eval-trajectory records: the folded state, the export/topic record, its encodings.

Format version `FORMAT_VERSION` (documented in docs/projections.md): the JSONL export and
the Avro schema `schemas/avro/projections/Trajectory.v2.avsc` carry the same fields in the
same order (v2 = v1 plus graph steps, added at the end of their records). A v1 body (the
projector's store before the upgrade) still decodes: `decode` tells them apart by their
first byte, the formatVersion. Timestamps are epoch milliseconds. Pure.

The fold replaces a few fields of these tuples per event, so each class gets a generated
`_replace` (same result as namedtuple's, without its `_make`/`map`/`pop` round trip).
"""

from __future__ import annotations

from typing import Any, NamedTuple, TypeVar

from runfacts.projections.records import ProjectionSchema, load

FORMAT_VERSION = 2
_new = tuple.__new__  # a NamedTuple from a tuple, without its Python-level __new__


class Budget(NamedTuple):
    steps: int = 0
    toolCalls: int = 0
    tokens: int = 0
    wallTimeMs: int = 0
    costMicros: int = 0

    def plus(self, amounts: dict[str, int]) -> Budget:
        return _new(Budget, (self.steps + amounts["steps"], self.toolCalls + amounts["toolCalls"],
                             self.tokens + amounts["tokens"],
                             self.wallTimeMs + amounts["wallTimeMs"],
                             self.costMicros + amounts["costMicros"]))


class Reasoning(NamedTuple):
    reasoningObjectId: str | None
    goalRef: str
    evidenceRefs: tuple[str, ...]
    conclusionHash: str
    conclusionRef: str | None


class Action(NamedTuple):
    toolCallId: str
    capabilityId: str | None
    action: str
    target: str
    argsHash: str
    argsRef: str
    risk: str
    proposedAt: int


class Approval(NamedTuple):
    approvalId: str | None
    outcome: str
    """pending | granted | rejected | expired | invalidated | not_required"""
    risk: str | None = None
    requiredRole: str | None = None
    decidedByRoles: tuple[str, ...] = ()
    decidedAt: int | None = None
    reason: str | None = None
    consumed: bool = False


class Execution(NamedTuple):
    status: str
    """authorized | dispatching | accepted | completed | failed | result_unknown | retry_requested"""
    attempts: int = 0
    resultRef: str | None = None
    resultHash: str | None = None
    errorClass: str | None = None
    retryable: bool | None = None
    reconciliation: str | None = None
    updatedAt: int | None = None


class Verification(NamedTuple):
    status: str
    evidenceRef: str | None
    updatedAt: int


class Feedback(NamedTuple):
    feedbackId: str
    rating: int
    target: str
    """run | turn | tool_call | reasoning"""
    recordedAt: int


class Turn(NamedTuple):
    turnId: str
    turnNumber: int


class Step(NamedTuple):
    index: int  # type: ignore[assignment]  # the Avro field name; shadows tuple.index (never called)
    turnId: str | None
    turnNumber: int | None
    reasoning: Reasoning | None = None
    action: Action | None = None
    approval: Approval | None = None
    execution: Execution | None = None
    verification: Verification | None = None
    feedback: tuple[Feedback, ...] = ()
    budgetUsed: Budget = Budget()
    graphStep: int | None = None
    """The index of the graph step (`GraphStep`) this step ran in, None: none recorded."""


class GraphStep(NamedTuple):
    """An agent framework's step, as a `checkpoint.saved` names it (a LangGraph bridge step:
    node `langgraph:<thread>:<checkpoint id>`), with the trajectory steps, tool calls and
    approvals in it."""

    index: int  # type: ignore[assignment]  # the Avro field name; shadows tuple.index (never called)
    node: str
    checkpointId: str | None
    stateHash: str
    savedAt: int
    steps: tuple[int, ...] = ()
    toolCallIds: tuple[str, ...] = ()
    approvalIds: tuple[str, ...] = ()


class Trajectory(NamedTuple):
    """The export/topic record of one run (field order = the Avro schema's)."""

    formatVersion: int
    runId: str
    status: str
    goalRef: str | None
    createdAt: int | None
    endedAt: int | None
    outcome: str | None
    """errorClass of a failed run, review reason, or outcomeRef of a completed one."""
    steps: tuple[Step, ...]
    feedback: tuple[Feedback, ...]
    budgetUsed: Budget
    turns: tuple[Turn, ...]
    eventCount: int
    lastEventId: str
    lastOccurredAt: int
    graphSteps: tuple[GraphStep, ...]


class RunPart(NamedTuple):
    """The parts of a trajectory that change rarely."""

    status: str = "created"
    goalRef: str | None = None
    createdAt: int | None = None
    endedAt: int | None = None
    outcome: str | None = None
    feedback: tuple[Feedback, ...] = ()
    turns: tuple[Turn, ...] = ()
    graphSteps: tuple[GraphStep, ...] = ()


class State(NamedTuple):
    """The view the reducer folds (split so that one event rebuilds little); `trajectory_of`
    turns it into the record."""

    runId: str
    run: RunPart
    steps: tuple[Step, ...]
    budget: Budget
    eventCount: int
    lastEventId: str
    lastOccurredAt: int


T = TypeVar("T", bound=tuple[Any, ...])
_KEEP = object()


def _fast_replace(cls: type[T]) -> None:
    """Give `cls` a generated `_replace(**changes)`: keyword-only arguments defaulting to
    'keep', one tuple built (an unknown field name raises TypeError)."""
    fields: tuple[str, ...] = cls._fields  # type: ignore[attr-defined]
    params = ", ".join(f"{f}=_KEEP" for f in fields)
    values = "".join(f"self[{i}] if {f} is _KEEP else {f}, " for i, f in enumerate(fields))
    scope: dict[str, Any] = {"_new": _new, "cls": cls, "_KEEP": _KEEP}
    exec(f"def _replace(self, *, {params}):\n    return _new(cls, ({values}))",  # noqa: S102
         scope)
    setattr(cls, "_replace", scope["_replace"])  # noqa: B010 - a method mypy cannot see


for _cls in (Budget, Reasoning, Action, Approval, Execution, Verification, Feedback, Turn, Step,
             GraphStep, Trajectory, RunPart, State):
    _fast_replace(_cls)


def trajectory_of(view: State) -> Trajectory:
    """The record of a state."""
    run = view.run
    return Trajectory(FORMAT_VERSION, view.runId, run.status, run.goalRef, run.createdAt,
                      run.endedAt, run.outcome, view.steps, run.feedback, view.budget, run.turns,
                      view.eventCount, view.lastEventId, view.lastOccurredAt, run.graphSteps)


def schema() -> ProjectionSchema:
    """The trajectory's shipped schema (the version the projector writes)."""
    return load("Trajectory", FORMAT_VERSION)


def encode(view: State) -> bytes:
    """The trajectory's Avro body (unframed)."""
    return schema().write_attrs(trajectory_of(view))


def decode(body: bytes) -> State:
    """The state an `encode`d (unframed) body came from: the live projector stores these. A body
    of an older format (its first byte: formatVersion, zigzag) is read with that version's schema."""
    version = body[0] >> 1 if body else FORMAT_VERSION
    return state_of((load("Trajectory", version) if 1 <= version < FORMAT_VERSION else schema()).read(body, 0))


def state_of(values: dict[str, Any]) -> State:
    """The State of a decoded Trajectory record (the record holds every field of the state)."""
    run = RunPart(values["status"], values["goalRef"], values["createdAt"], values["endedAt"],
                  values["outcome"], _feedback(values["feedback"]),
                  tuple(Turn(**t) for t in values["turns"]),
                  tuple(GraphStep(**{**g, "steps": tuple(g["steps"]), "toolCallIds": tuple(g["toolCallIds"]),
                                     "approvalIds": tuple(g["approvalIds"])})
                        for g in values.get("graphSteps", ())))
    return State(values["runId"], run, tuple(_step(s) for s in values["steps"]),
                 Budget(**values["budgetUsed"]), values["eventCount"], values["lastEventId"],
                 values["lastOccurredAt"])


def _step(v: dict[str, Any]) -> Step:
    reasoning, approval = v["reasoning"], v["approval"]
    return Step(
        v["index"], v["turnId"], v["turnNumber"],
        None if reasoning is None else Reasoning(**{**reasoning, "evidenceRefs": tuple(reasoning["evidenceRefs"])}),
        _maybe(Action, v["action"]),
        None if approval is None else Approval(**{**approval,
                                                  "decidedByRoles": tuple(approval["decidedByRoles"])}),
        _maybe(Execution, v["execution"]), _maybe(Verification, v["verification"]),
        _feedback(v["feedback"]), Budget(**v["budgetUsed"]), v.get("graphStep"))


def _maybe(cls: Any, value: dict[str, Any] | None) -> Any:
    return None if value is None else cls(**value)


def _feedback(values: list[dict[str, Any]]) -> tuple[Feedback, ...]:
    return tuple(Feedback(**f) for f in values)


def as_json(view: State) -> dict[str, Any]:
    """The trajectory as the JSON object of the export format (field names as in the schema)."""
    return _plain(trajectory_of(view))


def _plain(value: Any) -> Any:
    if isinstance(value, tuple) and hasattr(value, "_fields"):
        return {k: _plain(v) for k, v in zip(value._fields, value, strict=True)}
    if isinstance(value, tuple | list):
        return [_plain(v) for v in value]
    return value
