"""The gateway's operations as data and its OpenAPI 3.1 document, generated from them and from
the pydantic models (pure). The app (`app.py`) binds one handler to each operation here, so a
route cannot exist without being documented; a test checks the document against the running
gateway."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel
from pydantic.json_schema import models_json_schema

from runfacts.gateway import models as m

REF = "#/components/schemas/{model}"


@dataclass(frozen=True)
class Param:
    name: str
    where: str  # path, query, header
    schema: dict[str, Any]
    description: str
    required: bool = False


@dataclass(frozen=True)
class Operation:
    method: str
    path: str
    id: str
    summary: str
    answer: type[BaseModel] | None
    body: type[BaseModel] | None = None
    params: tuple[Param, ...] = ()
    stream: bool = False
    """Answers `text/event-stream` (Server-Sent Events)."""
    event: type[BaseModel] | None = None
    """The data of the stream's events, when one model (`x-event-data`)."""
    status: int = 200
    errors: tuple[int, ...] = field(default=(400, 401, 404, 429))


RUN = Param("run_id", "path", {"type": "string", "pattern": m.ID}, "The run's id.", required=True)
MIN_VERSION = Param("min_version", "query", {"type": "integer", "minimum": 0},
                    "Wait until the run is at least at this version (a write's answer).")
WAIT = Param("wait", "query", {"type": "number", "minimum": 0, "maximum": 30},
             "How long to wait for min_version, seconds (default 10).")
LAST_ID = Param("Last-Event-ID", "header", {"type": "string", "pattern": r"^\d+:\d+$"},
                "Resume just after this event id (`<partition>:<offset>`); browsers send it on reconnect.")
LAST_ID_Q = Param("last_event_id", "query", {"type": "string", "pattern": r"^\d+:\d+$"},
                  "As Last-Event-ID, for clients that cannot set headers.")
TOKEN_Q = Param("access_token", "query", {"type": "string"},
                "The API key, for EventSource (which cannot set Authorization). Prefer the header.")
IDEMPOTENCY = Param("Idempotency-Key", "header", {"type": "string", "minLength": 1, "maxLength": 200},
                    "Required on every POST: the same key and body answer the same; another body is a 422.",
                    required=True)
WRITE_ERRORS = (400, 401, 403, 404, 409, 413, 415, 422, 428, 429, 503)

OPERATIONS: tuple[Operation, ...] = (
    Operation("POST", "/runs", "startRun", "Start a run (idempotent on runId).", m.StartAnswer, m.StartRun,
              (IDEMPOTENCY,), status=201, errors=WRITE_ERRORS),
    Operation("POST", "/runs/{run_id}/reasoning", "recordReasoning", "Record reasoning (its hash, refs).",
              m.ReasoningAnswer, m.RecordReasoning, (RUN, IDEMPOTENCY), errors=WRITE_ERRORS),
    Operation("POST", "/runs/{run_id}/calls", "proposeCall", "Propose a tool call.", m.ProposeAnswer,
              m.ProposeCall, (RUN, IDEMPOTENCY), errors=WRITE_ERRORS),
    Operation("POST", "/runs/{run_id}/stop", "stopRun", "Stop a run.", m.Answer, m.EndRun, (RUN, IDEMPOTENCY),
              errors=WRITE_ERRORS),
    Operation("POST", "/runs/{run_id}/cancel", "cancelRun", "Cancel a run.", m.Answer, m.EndRun,
              (RUN, IDEMPOTENCY), errors=WRITE_ERRORS),
    Operation("POST", "/runs/{run_id}/approvals/{approval_id}/decision", "decideApproval",
              "Approve or reject, as the key's subject.", m.DecisionAnswer, m.DecideApproval,
              (RUN, Param("approval_id", "path", {"type": "string", "pattern": m.ID}, "The approval.", True),
               IDEMPOTENCY), errors=WRITE_ERRORS),
    Operation("GET", "/runs/{run_id}/state", "getRunState", "The run's state (read-your-writes: min_version).",
              m.RunState, params=(RUN, MIN_VERSION, WAIT), errors=(400, 401, 404, 412, 429)),
    Operation("GET", "/runs/{run_id}/view", "getRunView",
              "The run's view for the key's role; `Accept: text/event-stream` streams it (resumable).",
              m.RunView, params=(RUN, MIN_VERSION, WAIT, LAST_ID, LAST_ID_Q, TOKEN_Q), stream=True,
              errors=(400, 401, 404, 412, 429)),
    Operation("GET", "/runs/{run_id}/events", "streamRunEvents",
              "The run's facts as Server-Sent Events, id = Kafka position; resumes after Last-Event-ID.",
              None, params=(RUN, LAST_ID, LAST_ID_Q, TOKEN_Q), stream=True),
    Operation("POST", "/runs/{run_id}/output", "writeOutput",
              "Write a chunk of the run's partial output (the run's agent only; not its facts).", m.OutputAnswer,
              m.WriteOutput, (RUN, IDEMPOTENCY), errors=WRITE_ERRORS),
    Operation("GET", "/runs/{run_id}/output", "streamRunOutput",
              "The run's partial output as Server-Sent Events (`event: output`), each (stream, seq) once and in "
              "order, id = Kafka position; resumes after Last-Event-ID.",
              None, params=(RUN, LAST_ID, LAST_ID_Q, TOKEN_Q), stream=True, event=m.OutputChunk),
    Operation("GET", "/approvals", "listApprovals", "Pending approvals for one of the key's roles.",
              m.ApprovalList, params=(Param("role", "query", {"type": "string", "pattern": m.ROLE},
                                            "Only approvals requiring this role (one of the key's)."),)),
)


def document(version: str = "0.1.0") -> dict[str, Any]:
    """The OpenAPI 3.1 document of OPERATIONS."""
    models: set[type[BaseModel]] = {m.Problem}
    for op in OPERATIONS:
        models |= {t for t in (op.answer, op.body, op.event) if t is not None}
    _, defs = models_json_schema([(t, "validation" if _is_body(t) else "serialization")
                                  for t in sorted(models, key=lambda t: t.__name__)], ref_template=REF)
    paths: dict[str, dict[str, Any]] = {}
    for op in OPERATIONS:
        paths.setdefault(op.path, {})[op.method.lower()] = _operation(op)
    return {"openapi": "3.1.0",
            "info": {"title": "runfacts gateway", "version": version,
                     "description": "runfacts over HTTP: every write a command the run decider validates."},
            "paths": paths,
            "components": {"schemas": defs.get("$defs", {}),
                           "securitySchemes": {"apiKey": {"type": "http", "scheme": "bearer",
                                                          "description": "An API key of the gateway's key file."}}},
            "security": [{"apiKey": []}]}


def _is_body(model: type[BaseModel]) -> bool:
    return any(op.body is model for op in OPERATIONS)


def _ref(model: type[BaseModel]) -> dict[str, str]:
    return {"$ref": REF.format(model=model.__name__)}


def _operation(op: Operation) -> dict[str, Any]:
    content: dict[str, Any] = {}
    if op.answer is not None:
        content["application/json"] = {"schema": _ref(op.answer)}
    if op.stream:
        content["text/event-stream"] = {"schema": {"type": "string", "description":
                                                   "SSE: `id: <partition>:<offset>`, `event: <type>`, `data: <JSON>`"}}
        if op.event is not None:
            content["text/event-stream"]["x-event-data"] = _ref(op.event)
    problem = {"application/problem+json": {"schema": _ref(m.Problem)}}
    out: dict[str, Any] = {
        "operationId": op.id, "summary": op.summary,
        "parameters": [{"name": p.name, "in": p.where, "required": p.required, "schema": p.schema,
                        "description": p.description} for p in op.params],
        "responses": {str(op.status): {"description": "OK", "content": content},
                      **{str(code): {"description": "A problem document (RFC 9457)", "content": problem}
                         for code in op.errors}},
    }
    if op.body is not None:
        out["requestBody"] = {"required": True, "content": {"application/json": {"schema": _ref(op.body)}}}
    return out


__all__ = ["OPERATIONS", "Operation", "Param", "document"]
