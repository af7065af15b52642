"""The HTTP contract, pure: pydantic models of every request body and answer. The OpenAPI
document is generated from them (`openapi.py`); unknown fields are refused (a typo, or a field
the caller may not set, such as the approver, is a 422 naming it, never silently ignored)."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

ID = r"^[A-Za-z0-9][A-Za-z0-9._:@-]{0,199}$"
REF = r"^\S{1,256}$"
ROLE = r"^[a-z][a-z0-9_]{0,63}$"
MAX_TEXT = 4_000


class Body(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class StartRun(Body):
    """Start a run; idempotent on `runId` (the same runId again answers the same run)."""

    runId: str | None = Field(None, pattern=ID, description="Default: a fresh `run-<hex>`.")
    goal: str = Field(pattern=REF, description="A reference to the goal, e.g. `ticket:T-9001` (never its text).")
    summary: str = Field(min_length=1, max_length=MAX_TEXT)
    userId: str = Field(pattern=ID, description="The user the run acts for.")
    tenant: str | None = Field(None, pattern=ID)
    budget: dict[Literal["steps", "toolCalls", "tokens", "wallTimeMs", "costMicros"],
                 Annotated[int, Field(ge=0, le=2**62)]] | None = Field(
        None, description="Budget limits by dimension, whole numbers >= 0.")


class RecordReasoning(Body):
    """Record why: the conclusion's sha256 goes on the log, never its text."""

    conclusion: str = Field(min_length=1, max_length=100_000)
    evidence: list[str] = Field(default_factory=list, max_length=100, description="References, e.g. `order:o-1`.")
    goal: str | None = Field(None, pattern=REF, description="Default: the run's goal.")
    ref: str | None = Field(None, pattern=REF, description="Where your service keeps the text.")
    reasoningId: str | None = Field(None, pattern=ID)


class ProposeCall(Body):
    """Propose a side effect: the arguments go to the argument store, their hash on the log."""

    capability: str = Field(pattern=ID, description="A capability of the manifest, e.g. `payments.refund`.")
    arguments: dict[str, Any] = Field(description="The tool's arguments (JSON).")
    target: str = Field(pattern=REF)
    action: str | None = Field(None, pattern=ID)
    summary: str | None = Field(None, min_length=1, max_length=MAX_TEXT)
    toolCallId: str | None = Field(None, pattern=ID, description="Default: derived from run, capability, target "
                                                                  "and arguments (proposing again is the same call).")
    risk: Literal["low", "medium", "high"] = "medium"
    businessKey: str | None = Field(None, pattern=REF)
    reasoningId: str | None = Field(None, pattern=ID, description="The reasoning this proposal follows from.")


class DecideApproval(Body):
    """Approve or reject. The approver is the authenticated key's subject, never a body field."""

    decision: Literal["approve", "reject"]


class EndRun(Body):
    """Stop or cancel a run."""

    reason: str = Field("", max_length=MAX_TEXT)


class WriteOutput(Body):
    """One chunk of the run's partial output (tokens, progress): not its facts. Readers skip a
    chunk whose `seq` they already had for its `stream`, so a writer retried after a crash may
    send its chunks again from 0."""

    stream: str = Field("answer", pattern=ID, description="Which output of the run, e.g. `answer`.")
    seq: int = Field(ge=0, le=2**31, description="The chunk's number in its stream, from 0.")
    text: str = Field("", max_length=32_000)
    done: bool = Field(False, description="The stream's last chunk: readers that see none know it stopped.")
    status: Literal["done", "failed"] | None = Field(None, description="With `done`: how it ended (default done).")


class OutputAnswer(BaseModel):
    runId: str
    stream: str
    seq: int
    chunkId: str = Field(description="`<runId>/<stream>/<seq>`: the same for the same chunk written again.")


class OutputChunk(BaseModel):
    """The data of an `output` event of `GET /runs/{run_id}/output`."""

    runId: str
    stream: str
    seq: int
    text: str
    done: bool
    status: Literal["done", "failed"] | None = None
    writer: str = Field(description="The subject of the agent that wrote it.")
    at: str = Field(description="When it was written (ISO 8601): a stream without `done` stopped then.")


class Answer(BaseModel):
    """A command's answer: what the decider committed."""

    runId: str
    version: int = Field(description="The run's version after the command: `GET ...?min_version=` waits for it.")
    commandId: str


class StartAnswer(Answer):
    created: bool = Field(description="False: the run existed (the same runId again).")


class ReasoningAnswer(Answer):
    reasoningId: str


class ProposeAnswer(Answer):
    toolCallId: str
    argsHash: str
    approvalId: str | None = Field(None, description="The approval the call waits for, if the policy asks one.")


class DecisionAnswer(Answer):
    approvalId: str
    decision: Literal["approve", "reject"]
    approver: str


class ApprovalItem(BaseModel):
    """A pending approval, as an approval UI lists it."""

    runId: str
    approvalId: str
    toolCallId: str
    asks: str
    risk: str
    requiredRole: str
    expiresAt: datetime
    argsHash: str
    tenant: str | None
    requesters: list[str] = Field(description="who the request stands for (the run's user, its creator when a "
                                  "person): without self-approval none of them may decide it")
    arguments: list[str] = Field(default_factory=list, description="the call's arguments as the approver sees "
                                 "them (one line a field; personal values masked)")
    displayDigest: str | None = Field(default=None, description="what a decision binds besides argsHash")


class ApprovalList(BaseModel):
    approvals: list[ApprovalItem]


class RunState(BaseModel):
    """A run's state as the decider keeps it (the run-state topic)."""

    model_config = ConfigDict(extra="allow")
    runId: str
    version: int
    status: str


class RunView(BaseModel):
    """A run's view for the caller's role (user: as the decider published it)."""

    model_config = ConfigDict(extra="allow")
    version: int


class Problem(BaseModel):
    """An RFC 9457 problem document (`application/problem+json`)."""

    model_config = ConfigDict(extra="allow")
    type: str = Field(description="A URI naming the kind of problem, e.g. `urn:runfacts:problem:command-rejected`.")
    title: str
    status: int
    detail: str
    instance: str | None = None
    field: str | None = Field(None, description="The request field at fault, when one is.")
    fix: str | None = Field(None, description="What to change.")
    reason: str | None = Field(None, description="The decider's reason code of a typed rejection.")
    errors: list[dict[str, Any]] | None = None


__all__ = ["Answer", "ApprovalItem", "ApprovalList", "DecideApproval", "DecisionAnswer", "EndRun", "Problem",
           "ProposeAnswer", "ProposeCall", "ReasoningAnswer", "RecordReasoning", "RunState", "RunView",
           "StartAnswer", "StartRun"]
