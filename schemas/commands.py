"""Command models, generated from schemas/avro by `runfacts schemas generate`: do not edit."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, StringConstraints
from runfacts.schemas.base import Millis, Record
from runfacts.schemas.common import (
    Actor,
    ApprovalDecision,
    ArgDisplay,
    BudgetAmounts,
    ChildStatus,
    CommandBase,
    EvidenceItem,
    ReconcileOutcome,
    Risk,
    RunVersions,
    TimerKind,
    VerificationStatus,
)


class AppendEvidencePayload(Record):
    """Payload of AppendEvidence."""

    evidenceId: str
    hash: str
    ref: str


class AppendEvidence(CommandBase):
    """Append a piece of evidence under this run's id."""

    commandType: Literal["evidence.append"] = "evidence.append"
    schemaVersion: Literal[1] = 1
    payload: AppendEvidencePayload


class ArchiveRunPayload(Record):
    """Payload of ArchiveRun."""

    checkpointRef: str | None = None


class ArchiveRun(CommandBase):
    """Archive a finished run."""

    commandType: Literal["run.archive"] = "run.archive"
    schemaVersion: Literal[1] = 1
    payload: ArchiveRunPayload


class CancelRunPayload(Record):
    """Payload of CancelRun."""

    reason: str = ""


class CancelRun(CommandBase):
    """Start cancellation (Control)."""

    commandType: Literal["run.cancel"] = "run.cancel"
    schemaVersion: Literal[1] = 1
    payload: CancelRunPayload


class ClaimToolCallPayload(Record):
    """Payload of ClaimToolCall."""

    toolCallId: str
    attempt: int
    idempotencyKey: str
    externalRequestId: str
    leaseEpoch: int


class ClaimToolCall(CommandBase):
    """Claim an authorized call before calling it."""

    commandType: Literal["tool.call.claim"] = "tool.call.claim"
    schemaVersion: Literal[1] = 1
    payload: ClaimToolCallPayload


class CompleteRunPayload(Record):
    """Payload of CompleteRun."""

    outcomeRef: str | None = None


class CompleteRun(CommandBase):
    """End the run successfully."""

    commandType: Literal["run.complete"] = "run.complete"
    schemaVersion: Literal[1] = 1
    payload: CompleteRunPayload


class CompleteTurnPayload(Record):
    """Payload of CompleteTurn."""

    turnId: str


class CompleteTurn(CommandBase):
    """End a turn (agent harness)."""

    commandType: Literal["turn.complete"] = "turn.complete"
    schemaVersion: Literal[1] = 1
    payload: CompleteTurnPayload


class CreateChildRunPayload(Record):
    """Payload of CreateChildRun."""

    parentRunId: str
    goalRef: str
    goalSummary: str
    userId: str
    tenant: str | None = None
    budget: BudgetAmounts
    versions: RunVersions
    creator: Actor


class CreateChildRun(CommandBase):
    """Create a run as a child (sent by the parent's decider)."""

    commandType: Literal["run.create_child"] = "run.create_child"
    schemaVersion: Literal[1] = 1
    payload: CreateChildRunPayload


class CreateRunPayload(Record):
    """Payload of CreateRun."""

    goalRef: str
    goalSummary: str
    userId: str
    tenant: str | None = None
    budget: BudgetAmounts
    versions: RunVersions


class CreateRun(CommandBase):
    """Create a run (Control)."""

    commandType: Literal["run.create"] = "run.create"
    schemaVersion: Literal[1] = 1
    payload: CreateRunPayload


class DebitBudgetPayload(Record):
    """Payload of DebitBudget."""

    amounts: BudgetAmounts
    actionHash: str


class DebitBudget(CommandBase):
    """Debit budget for a model or tool step."""

    commandType: Literal["budget.debit"] = "budget.debit"
    schemaVersion: Literal[1] = 1
    payload: DebitBudgetPayload


class DrainVersionPayload(Record):
    """Payload of DrainVersion."""

    dimension: str
    version: str
    undo: bool = False
    reason: str = ""


class DrainVersion(CommandBase):
    """Stop new runs starting on a version (operator; one per partition)."""

    commandType: Literal["version.drain"] = "version.drain"
    schemaVersion: Literal[1] = 1
    payload: DrainVersionPayload


class EraseSubjectPayload(Record):
    """Payload of EraseSubject."""

    subjectRef: str
    requestRef: str


class EraseSubject(CommandBase):
    """Erase a data subject's keys (operator; right to erasure)."""

    commandType: Literal["subject.erase"] = "subject.erase"
    schemaVersion: Literal[1] = 1
    payload: EraseSubjectPayload


class FailRunPayload(Record):
    """Payload of FailRun."""

    errorClass: Annotated[str, StringConstraints(pattern=r"^[a-z][a-z0-9_]*$")]
    detail: str = ""


class FailRun(CommandBase):
    """End the run in failure."""

    commandType: Literal["run.fail"] = "run.fail"
    schemaVersion: Literal[1] = 1
    payload: FailRunPayload


class FireTimerPayload(Record):
    """Payload of FireTimer."""

    timerId: str
    kind: TimerKind
    targetId: str
    dueAt: Millis


class FireTimer(CommandBase):
    """A decider timer fell due."""

    commandType: Literal["timer.fire"] = "timer.fire"
    schemaVersion: Literal[3] = 3
    payload: FireTimerPayload


class MigrateRunPayload(Record):
    """Payload of MigrateRun."""

    versions: RunVersions
    toNode: str | None = None


class MigrateRun(CommandBase):
    """Move a paused run to new versions explicitly."""

    commandType: Literal["run.migrate"] = "run.migrate"
    schemaVersion: Literal[2] = 2
    payload: MigrateRunPayload


class PauseToolPayload(Record):
    """Payload of PauseTool."""

    capabilityId: str
    reason: str


class PauseTool(CommandBase):
    """Pause a capability for the whole fleet (operator): no new dispatch."""

    commandType: Literal["tool.pause"] = "tool.pause"
    schemaVersion: Literal[1] = 1
    payload: PauseToolPayload


class ProposeMemoryPayload(Record):
    """Payload of ProposeMemory."""

    memoryId: str
    statementRef: str
    statementHash: str
    evidence: tuple[str, ...] = ()
    scopeTenant: str
    scopeKind: Annotated[str, StringConstraints(pattern=r"^[a-z][a-z0-9_]*$")]
    scopeId: str
    expiresAt: Millis
    summary: str | None = None


class ProposeMemory(CommandBase):
    """Propose what the run learned as a memory candidate."""

    commandType: Literal["memory.propose"] = "memory.propose"
    schemaVersion: Literal[1] = 1
    payload: ProposeMemoryPayload


class ProposeToolCallPayload(Record):
    """Payload of ProposeToolCall."""

    toolCallId: str
    capabilityId: str
    turnId: str | None = None
    reasoningObjectId: str | None = None
    argsHash: str
    argsRef: str
    target: str
    action: str
    risk: Risk
    summary: str
    businessKey: str | None = None
    display: ArgDisplay | None = None


class ProposeToolCall(CommandBase):
    """Propose a side effect (agent harness)."""

    commandType: Literal["tool.call.propose"] = "tool.call.propose"
    schemaVersion: Literal[3] = 3
    payload: ProposeToolCallPayload


class RecordFeedbackPayload(Record):
    """Payload of RecordFeedback."""

    feedbackId: str
    rating: int
    comment: str | None = None
    targetTurnId: str | None = None
    targetToolCallId: str | None = None
    targetReasoningObjectId: str | None = None


class RecordFeedback(CommandBase):
    """Record feedback (Control)."""

    commandType: Literal["feedback.record"] = "feedback.record"
    schemaVersion: Literal[1] = 1
    payload: RecordFeedbackPayload


class RecordReasoningPayload(Record):
    """Payload of RecordReasoning."""

    reasoningObjectId: str
    turnId: str | None = None
    goalRef: str
    evidenceRefs: tuple[str, ...] = ()
    conclusionHash: str
    conclusionRef: str | None = None


class RecordReasoning(CommandBase):
    """Record why (refs and hashes only)."""

    commandType: Literal["reasoning.record"] = "reasoning.record"
    schemaVersion: Literal[1] = 1
    payload: RecordReasoningPayload


class ReportChildEvidencePayload(Record):
    """Payload of ReportChildEvidence."""

    childRunId: str
    chunk: int
    chunks: int
    evidence: tuple[EvidenceItem, ...] = ()


class ReportChildEvidence(CommandBase):
    """Part of an ended child's evidence for its parent, when its ledger does not fit in one record (sent by the child's decider, in order, before its child.report, which then carries none)."""

    commandType: Literal["child.report_evidence"] = "child.report_evidence"
    schemaVersion: Literal[1] = 1
    payload: ReportChildEvidencePayload


class ReportChildRunPayload(Record):
    """Payload of ReportChildRun."""

    childRunId: str
    status: ChildStatus
    reason: str = ""
    used: BudgetAmounts
    evidence: tuple[EvidenceItem, ...] = ()


class ReportChildRun(CommandBase):
    """A child's news for its parent (sent by the child's decider)."""

    commandType: Literal["child.report"] = "child.report"
    schemaVersion: Literal[1] = 1
    payload: ReportChildRunPayload


class ReportReconciledPayload(Record):
    """Payload of ReportReconciled."""

    toolCallId: str
    externalRequestId: str
    outcome: ReconcileOutcome
    resultRef: str | None = None
    resultHash: str | None = None
    result: str | None = None


class ReportReconciled(CommandBase):
    """What reconciliation found."""

    commandType: Literal["tool.call.report_reconciled"] = "tool.call.report_reconciled"
    schemaVersion: Literal[2] = 2
    payload: ReportReconciledPayload


class ReportResultUnknownPayload(Record):
    """Payload of ReportResultUnknown."""

    toolCallId: str
    attempt: int
    externalRequestId: str
    lastError: str = ""


class ReportResultUnknown(CommandBase):
    """The response was lost."""

    commandType: Literal["tool.call.report_result_unknown"] = "tool.call.report_result_unknown"
    schemaVersion: Literal[1] = 1
    payload: ReportResultUnknownPayload


class ReportToolAcceptedPayload(Record):
    """Payload of ReportToolAccepted."""

    toolCallId: str
    attempt: int
    externalRequestId: str


class ReportToolAccepted(CommandBase):
    """The tool acknowledged."""

    commandType: Literal["tool.call.report_accepted"] = "tool.call.report_accepted"
    schemaVersion: Literal[1] = 1
    payload: ReportToolAcceptedPayload


class ReportToolCompletedPayload(Record):
    """Payload of ReportToolCompleted."""

    toolCallId: str
    attempt: int
    externalRequestId: str
    resultRef: str
    resultHash: str
    result: str | None = None
    verification: VerificationStatus | None = None


class ReportToolCompleted(CommandBase):
    """The tool completed."""

    commandType: Literal["tool.call.report_completed"] = "tool.call.report_completed"
    schemaVersion: Literal[3] = 3
    payload: ReportToolCompletedPayload


class ReportToolFailedPayload(Record):
    """Payload of ReportToolFailed."""

    toolCallId: str
    attempt: int
    externalRequestId: str
    errorClass: Annotated[str, StringConstraints(pattern=r"^[a-z][a-z0-9_]*$")]
    retryable: bool
    message: str = ""


class ReportToolFailed(CommandBase):
    """The tool failed."""

    commandType: Literal["tool.call.report_failed"] = "tool.call.report_failed"
    schemaVersion: Literal[1] = 1
    payload: ReportToolFailedPayload


class ReportToolHeldPayload(Record):
    """Payload of ReportToolHeld."""

    toolCallId: str
    pauseId: str
    pausedBy: str
    reason: str = ""
    pausedAt: Millis


class ReportToolHeld(CommandBase):
    """A dispatcher holds a call because its capability is paused."""

    commandType: Literal["tool.call.report_held"] = "tool.call.report_held"
    schemaVersion: Literal[1] = 1
    payload: ReportToolHeldPayload


class ReportVerificationPayload(Record):
    """Payload of ReportVerification."""

    toolCallId: str
    status: VerificationStatus
    evidenceRef: str | None = None


class ReportVerification(CommandBase):
    """Verification observed."""

    commandType: Literal["tool.call.report_verification"] = "tool.call.report_verification"
    schemaVersion: Literal[1] = 1
    payload: ReportVerificationPayload


class RequestReconciliationPayload(Record):
    """Payload of RequestReconciliation."""

    toolCallId: str
    externalRequestId: str


class RequestReconciliation(CommandBase):
    """Ask to reconcile a call whose outcome is unknown."""

    commandType: Literal["tool.call.request_reconciliation"] = "tool.call.request_reconciliation"
    schemaVersion: Literal[1] = 1
    payload: RequestReconciliationPayload


class ResolveCompensationPayload(Record):
    """Payload of ResolveCompensation."""

    toolCallId: str
    decision: Annotated[str, StringConstraints(pattern=r"^[a-z][a-z0-9_]*$")]
    note: str = ""


class ResolveCompensation(CommandBase):
    """A person resolves an undo that stopped the run in needs_review (operator)."""

    commandType: Literal["compensation.resolve"] = "compensation.resolve"
    schemaVersion: Literal[1] = 1
    payload: ResolveCompensationPayload


class ResumeRunPayload(Record):
    """Payload of ResumeRun."""

    approvalId: str
    decision: ApprovalDecision
    argsHash: str
    approvalToken: str | None = None
    displayDigest: str | None = None


class ResumeRun(CommandBase):
    """Decide a pending approval (Control)."""

    commandType: Literal["run.resume"] = "run.resume"
    schemaVersion: Literal[2] = 2
    payload: ResumeRunPayload


class ResumeToolPayload(Record):
    """Payload of ResumeTool."""

    capabilityId: str
    reason: str = ""


class ResumeTool(CommandBase):
    """Resume a paused capability (operator): held calls are dispatched."""

    commandType: Literal["tool.resume"] = "tool.resume"
    schemaVersion: Literal[1] = 1
    payload: ResumeToolPayload


class RetryToolCallPayload(Record):
    """Payload of RetryToolCall."""

    toolCallId: str


class RetryToolCall(CommandBase):
    """Retry a retryable failed call (Control)."""

    commandType: Literal["tool.call.retry"] = "tool.call.retry"
    schemaVersion: Literal[1] = 1
    payload: RetryToolCallPayload


class ReviewMemoryPayload(Record):
    """Payload of ReviewMemory."""

    memoryId: str
    decision: ApprovalDecision
    candidateHash: str
    reviewToken: str | None = None


class ReviewMemory(CommandBase):
    """Confirm or reject a memory candidate (reviewer)."""

    commandType: Literal["memory.review"] = "memory.review"
    schemaVersion: Literal[1] = 1
    payload: ReviewMemoryPayload


class RevokeMemoryPayload(Record):
    """Payload of RevokeMemory."""

    memoryId: str
    reason: str = ""


class RevokeMemory(CommandBase):
    """Withdraw a memory or a candidate."""

    commandType: Literal["memory.revoke"] = "memory.revoke"
    schemaVersion: Literal[1] = 1
    payload: RevokeMemoryPayload


class SaveCheckpointPayload(Record):
    """Payload of SaveCheckpoint."""

    node: str
    stateHash: str
    versions: RunVersions


class SaveCheckpoint(CommandBase):
    """Save a recovery checkpoint."""

    commandType: Literal["checkpoint.save"] = "checkpoint.save"
    schemaVersion: Literal[1] = 1
    payload: SaveCheckpointPayload


class StartChildRunPayload(Record):
    """Payload of StartChildRun."""

    childRunId: str
    goalRef: str
    goalSummary: str
    budget: BudgetAmounts


class StartChildRun(CommandBase):
    """Start a child run with a sub-budget reserved from this run's."""

    commandType: Literal["child.start"] = "child.start"
    schemaVersion: Literal[1] = 1
    payload: StartChildRunPayload


class StartTurnPayload(Record):
    """Payload of StartTurn."""

    turnId: str


class StartTurn(CommandBase):
    """Begin a turn (agent harness)."""

    commandType: Literal["turn.start"] = "turn.start"
    schemaVersion: Literal[1] = 1
    payload: StartTurnPayload


class StopRunPayload(Record):
    """Payload of StopRun."""

    reason: str = ""


class StopRun(CommandBase):
    """Stop taking new steps (Control)."""

    commandType: Literal["run.stop"] = "run.stop"
    schemaVersion: Literal[1] = 1
    payload: StopRunPayload


class UpdateProgressPayload(Record):
    """Payload of UpdateProgress."""

    verifiedItems: tuple[str, ...] = ()
    openItems: tuple[str, ...] = ()
    nextSafeAction: str


class UpdateProgress(CommandBase):
    """Update the Progress Contract."""

    commandType: Literal["progress.update"] = "progress.update"
    schemaVersion: Literal[1] = 1
    payload: UpdateProgressPayload


Command = Annotated[
    AppendEvidence
    | ArchiveRun
    | CancelRun
    | ClaimToolCall
    | CompleteRun
    | CompleteTurn
    | CreateChildRun
    | CreateRun
    | DebitBudget
    | DrainVersion
    | EraseSubject
    | FailRun
    | FireTimer
    | MigrateRun
    | PauseTool
    | ProposeMemory
    | ProposeToolCall
    | RecordFeedback
    | RecordReasoning
    | ReportChildEvidence
    | ReportChildRun
    | ReportReconciled
    | ReportResultUnknown
    | ReportToolAccepted
    | ReportToolCompleted
    | ReportToolFailed
    | ReportToolHeld
    | ReportVerification
    | RequestReconciliation
    | ResolveCompensation
    | ResumeRun
    | ResumeTool
    | RetryToolCall
    | ReviewMemory
    | RevokeMemory
    | SaveCheckpoint
    | StartChildRun
    | StartTurn
    | StopRun
    | UpdateProgress,
    Field(discriminator="commandType"),
]
"""Any current command, discriminated on commandType."""


COMMAND_CLASSES: dict[str, type[CommandBase]] = {
    "evidence.append": AppendEvidence,
    "run.archive": ArchiveRun,
    "run.cancel": CancelRun,
    "tool.call.claim": ClaimToolCall,
    "run.complete": CompleteRun,
    "turn.complete": CompleteTurn,
    "run.create_child": CreateChildRun,
    "run.create": CreateRun,
    "budget.debit": DebitBudget,
    "version.drain": DrainVersion,
    "subject.erase": EraseSubject,
    "run.fail": FailRun,
    "timer.fire": FireTimer,
    "run.migrate": MigrateRun,
    "tool.pause": PauseTool,
    "memory.propose": ProposeMemory,
    "tool.call.propose": ProposeToolCall,
    "feedback.record": RecordFeedback,
    "reasoning.record": RecordReasoning,
    "child.report_evidence": ReportChildEvidence,
    "child.report": ReportChildRun,
    "tool.call.report_reconciled": ReportReconciled,
    "tool.call.report_result_unknown": ReportResultUnknown,
    "tool.call.report_accepted": ReportToolAccepted,
    "tool.call.report_completed": ReportToolCompleted,
    "tool.call.report_failed": ReportToolFailed,
    "tool.call.report_held": ReportToolHeld,
    "tool.call.report_verification": ReportVerification,
    "tool.call.request_reconciliation": RequestReconciliation,
    "compensation.resolve": ResolveCompensation,
    "run.resume": ResumeRun,
    "tool.resume": ResumeTool,
    "tool.call.retry": RetryToolCall,
    "memory.review": ReviewMemory,
    "memory.revoke": RevokeMemory,
    "checkpoint.save": SaveCheckpoint,
    "child.start": StartChildRun,
    "turn.start": StartTurn,
    "run.stop": StopRun,
    "progress.update": UpdateProgress,
}
