"""Event models, generated from schemas/avro by `runfacts schemas generate`: do not edit."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, StringConstraints
from runfacts.schemas.base import Millis, Record
from runfacts.schemas.common import (
    Actor,
    ArgDisplay,
    BudgetAmounts,
    BudgetDimension,
    ChildStatus,
    EventBase,
    EvidenceItem,
    InvalidationReason,
    PauseReason,
    ReconcileOutcome,
    ReviewReason,
    Risk,
    RunVersions,
    VerificationStatus,
)


class ApprovalConsumedPayload(Record):
    """Payload of ApprovalConsumed."""

    approvalId: str
    toolCallId: str


class ApprovalConsumed(EventBase):
    """A granted approval was used (at most once)."""

    eventType: Literal["approval.consumed"] = "approval.consumed"
    schemaVersion: Literal[1] = 1
    payload: ApprovalConsumedPayload


class ApprovalExpiredPayload(Record):
    """Payload of ApprovalExpired."""

    approvalId: str
    toolCallId: str
    expiresAt: Millis


class ApprovalExpired(EventBase):
    """The approval was not decided in time."""

    eventType: Literal["approval.expired"] = "approval.expired"
    schemaVersion: Literal[1] = 1
    payload: ApprovalExpiredPayload


class ApprovalGrantedPayload(Record):
    """Payload of ApprovalGranted."""

    approvalId: str
    toolCallId: str
    argsHash: str
    actor: Actor
    displayDigest: str | None = None


class ApprovalGranted(EventBase):
    """An approver allowed the call."""

    eventType: Literal["approval.granted"] = "approval.granted"
    schemaVersion: Literal[2] = 2
    payload: ApprovalGrantedPayload


class ApprovalInvalidatedPayload(Record):
    """Payload of ApprovalInvalidated."""

    approvalId: str
    toolCallId: str
    reason: InvalidationReason
    detail: str = ""


class ApprovalInvalidated(EventBase):
    """A pending approval can't be used."""

    eventType: Literal["approval.invalidated"] = "approval.invalidated"
    schemaVersion: Literal[1] = 1
    payload: ApprovalInvalidatedPayload


class ApprovalRejectedPayload(Record):
    """Payload of ApprovalRejected."""

    approvalId: str
    toolCallId: str
    argsHash: str
    actor: Actor


class ApprovalRejected(EventBase):
    """An approver refused the call."""

    eventType: Literal["approval.rejected"] = "approval.rejected"
    schemaVersion: Literal[1] = 1
    payload: ApprovalRejectedPayload


class ApprovalRequiredPayload(Record):
    """Payload of ApprovalRequired."""

    approvalId: str
    toolCallId: str
    argsHash: str
    risk: Risk
    requiredRole: str
    expiresAt: Millis
    summary: str
    display: ArgDisplay | None = None
    displayDigest: str | None = None
    proposedBy: Actor | None = None


class ApprovalRequired(EventBase):
    """A tool call waits for a person's approval."""

    eventType: Literal["approval.required"] = "approval.required"
    schemaVersion: Literal[2] = 2
    payload: ApprovalRequiredPayload


class BudgetDebitedPayload(Record):
    """Payload of BudgetDebited."""

    amounts: BudgetAmounts
    actionHash: str


class BudgetDebited(EventBase):
    """A model or tool step used budget."""

    eventType: Literal["budget.debited"] = "budget.debited"
    schemaVersion: Literal[1] = 1
    payload: BudgetDebitedPayload


class BudgetExceededPayload(Record):
    """Payload of BudgetExceeded."""

    dimension: BudgetDimension
    limit: int
    used: int


class BudgetExceeded(EventBase):
    """A budget dimension ran out."""

    eventType: Literal["budget.exceeded"] = "budget.exceeded"
    schemaVersion: Literal[1] = 1
    payload: BudgetExceededPayload


class CheckpointSavedPayload(Record):
    """Payload of CheckpointSaved."""

    node: str
    stateHash: str
    versions: RunVersions


class CheckpointSaved(EventBase):
    """A recovery checkpoint (not durable execution)."""

    eventType: Literal["checkpoint.saved"] = "checkpoint.saved"
    schemaVersion: Literal[1] = 1
    payload: CheckpointSavedPayload


class CheckpointsArchivedPayload(Record):
    """Payload of CheckpointsArchived."""

    node: str | None = None
    stateHash: str | None = None
    reason: Annotated[str, StringConstraints(pattern=r"^[a-z][a-z0-9_]*$")]


class CheckpointsArchived(EventBase):
    """The run's checkpoints serve no recovery any more: a retention marker stores honour."""

    eventType: Literal["checkpoint.archived"] = "checkpoint.archived"
    schemaVersion: Literal[1] = 1
    payload: CheckpointsArchivedPayload


class ChildRunReportedPayload(Record):
    """Payload of ChildRunReported."""

    childRunId: str
    status: ChildStatus
    reason: str = ""
    used: BudgetAmounts
    released: BudgetAmounts


class ChildRunReported(EventBase):
    """A child reported: needs review, or its end."""

    eventType: Literal["child.reported"] = "child.reported"
    schemaVersion: Literal[1] = 1
    payload: ChildRunReportedPayload


class ChildRunRequestedPayload(Record):
    """Payload of ChildRunRequested."""

    childRunId: str
    goalRef: str
    budget: BudgetAmounts


class ChildRunRequested(EventBase):
    """A child run was asked for; its sub-budget is reserved."""

    eventType: Literal["child.requested"] = "child.requested"
    schemaVersion: Literal[1] = 1
    payload: ChildRunRequestedPayload


class CommandRejectedPayload(Record):
    """Payload of CommandRejected."""

    commandId: str
    commandType: str
    reasonCode: Annotated[str, StringConstraints(pattern=r"^[a-z][a-z0-9_]*$")]
    detail: str = ""
    expectedVersion: int | None = None
    actualVersion: int


class CommandRejected(EventBase):
    """A command the run's state did not allow."""

    eventType: Literal["command.rejected"] = "command.rejected"
    schemaVersion: Literal[1] = 1
    payload: CommandRejectedPayload


class CompensationPlannedPayload(Record):
    """Payload of CompensationPlanned."""

    toolCallId: str
    compensationCapabilityId: str
    arguments: str | None = None
    problem: str | None = None


class CompensationPlanned(EventBase):
    """How a completed call would be undone: its compensation's arguments, or why not."""

    eventType: Literal["compensation.planned"] = "compensation.planned"
    schemaVersion: Literal[1] = 1
    payload: CompensationPlannedPayload


class CompensationResolvedPayload(Record):
    """Payload of CompensationResolved."""

    toolCallId: str
    decision: Annotated[str, StringConstraints(pattern=r"^[a-z][a-z0-9_]*$")]
    note: str = ""
    reason: Annotated[str, StringConstraints(pattern=r"^[a-z][a-z0-9_]*$")]
    notUndone: tuple[str, ...] = ()
    actor: Actor


class CompensationResolved(EventBase):
    """A person resolved an undo that stopped for review: the run compensates again, or ends."""

    eventType: Literal["compensation.resolved"] = "compensation.resolved"
    schemaVersion: Literal[1] = 1
    payload: CompensationResolvedPayload


class CompensationStartedPayload(Record):
    """Payload of CompensationStarted."""

    toolCallId: str
    compensationToolCallId: str
    compensationCapabilityId: str
    reason: Annotated[str, StringConstraints(pattern=r"^[a-z][a-z0-9_]*$")]
    remaining: tuple[str, ...] = ()
    detail: str = ""


class CompensationStarted(EventBase):
    """The run undoes a completed call: the compensating call (an ordinary governed call) follows."""

    eventType: Literal["compensation.started"] = "compensation.started"
    schemaVersion: Literal[1] = 1
    payload: CompensationStartedPayload


class EvidenceAppendedPayload(Record):
    """Payload of EvidenceAppended."""

    item: EvidenceItem


class EvidenceAppended(EventBase):
    """A piece of evidence under this run's own id."""

    eventType: Literal["evidence.appended"] = "evidence.appended"
    schemaVersion: Literal[1] = 1
    payload: EvidenceAppendedPayload


class EvidenceConflictDetectedPayload(Record):
    """Payload of EvidenceConflictDetected."""

    childRunId: str
    evidenceId: str
    heldHash: str
    heldBy: str
    offeredHash: str
    offeredBy: str


class EvidenceConflictDetected(EventBase):
    """A child offered an evidence id this run holds with another hash; nothing was overwritten."""

    eventType: Literal["evidence.conflict_detected"] = "evidence.conflict_detected"
    schemaVersion: Literal[1] = 1
    payload: EvidenceConflictDetectedPayload


class EvidenceMergedPayload(Record):
    """Payload of EvidenceMerged."""

    childRunId: str
    items: tuple[EvidenceItem, ...] = ()
    overflow: tuple[str, ...] = ()


class EvidenceMerged(EventBase):
    """A child's evidence joined this run's (new or equal items)."""

    eventType: Literal["evidence.merged"] = "evidence.merged"
    schemaVersion: Literal[1] = 1
    payload: EvidenceMergedPayload


class FeedbackRecordedPayload(Record):
    """Payload of FeedbackRecorded."""

    feedbackId: str
    rating: int
    comment: str | None = None
    targetTurnId: str | None = None
    targetToolCallId: str | None = None
    targetReasoningObjectId: str | None = None
    actor: Actor


class FeedbackRecorded(EventBase):
    """Feedback on a run, turn or call."""

    eventType: Literal["feedback.recorded"] = "feedback.recorded"
    schemaVersion: Literal[1] = 1
    payload: FeedbackRecordedPayload


class GrantRevokedPayload(Record):
    """Payload of GrantRevoked."""

    toolCallId: str
    approvalId: str | None = None
    grantKind: Annotated[str, StringConstraints(pattern=r"^[a-z][a-z0-9_]*$")]
    reason: Annotated[str, StringConstraints(pattern=r"^[a-z][a-z0-9_]*$")]


class GrantRevoked(EventBase):
    """A run-scoped grant ended with its run (run-end hygiene)."""

    eventType: Literal["grant.revoked"] = "grant.revoked"
    schemaVersion: Literal[1] = 1
    payload: GrantRevokedPayload


class MemoryConfirmedPayload(Record):
    """Payload of MemoryConfirmed."""

    memoryId: str
    candidateHash: str
    actor: Actor


class MemoryConfirmed(EventBase):
    """A reviewer promoted a candidate to memory."""

    eventType: Literal["memory.confirmed"] = "memory.confirmed"
    schemaVersion: Literal[1] = 1
    payload: MemoryConfirmedPayload


class MemoryExpiredPayload(Record):
    """Payload of MemoryExpired."""

    memoryId: str
    expiresAt: Millis


class MemoryExpired(EventBase):
    """A memory (or candidate) reached its expiry (the decider's timer)."""

    eventType: Literal["memory.expired"] = "memory.expired"
    schemaVersion: Literal[1] = 1
    payload: MemoryExpiredPayload


class MemoryProposedPayload(Record):
    """Payload of MemoryProposed."""

    memoryId: str
    statementRef: str
    statementHash: str
    evidence: tuple[str, ...] = ()
    scopeTenant: str
    scopeKind: Annotated[str, StringConstraints(pattern=r"^[a-z][a-z0-9_]*$")]
    scopeId: str
    expiresAt: Millis
    candidateHash: str
    summary: str | None = None
    actor: Actor


class MemoryProposed(EventBase):
    """A run proposed a memory candidate (refs, never raw text)."""

    eventType: Literal["memory.proposed"] = "memory.proposed"
    schemaVersion: Literal[1] = 1
    payload: MemoryProposedPayload


class MemoryRejectedPayload(Record):
    """Payload of MemoryRejected."""

    memoryId: str
    candidateHash: str
    actor: Actor


class MemoryRejected(EventBase):
    """A reviewer refused a candidate."""

    eventType: Literal["memory.rejected"] = "memory.rejected"
    schemaVersion: Literal[1] = 1
    payload: MemoryRejectedPayload


class MemoryRevokedPayload(Record):
    """Payload of MemoryRevoked."""

    memoryId: str
    reason: str = ""
    actor: Actor


class MemoryRevoked(EventBase):
    """A memory (or candidate) may no longer be relied on."""

    eventType: Literal["memory.revoked"] = "memory.revoked"
    schemaVersion: Literal[1] = 1
    payload: MemoryRevokedPayload


class ParentLinkedPayload(Record):
    """Payload of ParentLinked."""

    parentRunId: str


class ParentLinked(EventBase):
    """This run is a child of parentRunId."""

    eventType: Literal["run.parent_linked"] = "run.parent_linked"
    schemaVersion: Literal[1] = 1
    payload: ParentLinkedPayload


class ProgressUpdatedPayload(Record):
    """Payload of ProgressUpdated."""

    verifiedItems: tuple[str, ...] = ()
    openItems: tuple[str, ...] = ()
    nextSafeAction: str


class ProgressUpdated(EventBase):
    """The run's Progress Contract."""

    eventType: Literal["progress.updated"] = "progress.updated"
    schemaVersion: Literal[1] = 1
    payload: ProgressUpdatedPayload


class ReasoningRecordedPayload(Record):
    """Payload of ReasoningRecorded."""

    goalRef: str
    evidenceRefs: tuple[str, ...] = ()
    conclusionHash: str
    conclusionRef: str | None = None


class ReasoningRecorded(EventBase):
    """Why an action was proposed: refs and hashes only, never raw reasoning."""

    eventType: Literal["reasoning.recorded"] = "reasoning.recorded"
    schemaVersion: Literal[1] = 1
    payload: ReasoningRecordedPayload


class RunArchivedPayload(Record):
    """Payload of RunArchived."""

    checkpointRef: str | None = None


class RunArchived(EventBase):
    """Run state archived; approvals closed."""

    eventType: Literal["run.archived"] = "run.archived"
    schemaVersion: Literal[1] = 1
    payload: RunArchivedPayload


class RunCancelRequestedPayload(Record):
    """Payload of RunCancelRequested."""

    reason: str = ""
    actor: Actor


class RunCancelRequested(EventBase):
    """Cancellation began: no new work."""

    eventType: Literal["run.cancel_requested"] = "run.cancel_requested"
    schemaVersion: Literal[1] = 1
    payload: RunCancelRequestedPayload


class RunCancelledPayload(Record):
    """Payload of RunCancelled."""

    unresolvedToolCalls: tuple[str, ...] = ()


class RunCancelled(EventBase):
    """Cancellation finished: terminal."""

    eventType: Literal["run.cancelled"] = "run.cancelled"
    schemaVersion: Literal[1] = 1
    payload: RunCancelledPayload


class RunCompensatedPayload(Record):
    """Payload of RunCompensated."""

    reason: Annotated[str, StringConstraints(pattern=r"^[a-z][a-z0-9_]*$")]
    compensatedToolCalls: tuple[str, ...] = ()
    unresolvedToolCalls: tuple[str, ...] = ()


class RunCompensated(EventBase):
    """Every completed call with a compensation was undone: terminal."""

    eventType: Literal["run.compensated"] = "run.compensated"
    schemaVersion: Literal[1] = 1
    payload: RunCompensatedPayload


class RunCompletedPayload(Record):
    """Payload of RunCompleted."""

    outcomeRef: str | None = None
    pendingVerifications: tuple[str, ...] = ()


class RunCompleted(EventBase):
    """The run ended successfully."""

    eventType: Literal["run.completed"] = "run.completed"
    schemaVersion: Literal[1] = 1
    payload: RunCompletedPayload


class RunCreatedPayload(Record):
    """Payload of RunCreated."""

    goalRef: str
    goalSummary: str
    userId: str
    tenant: str | None = None
    budget: BudgetAmounts
    versions: RunVersions
    actor: Actor


class RunCreated(EventBase):
    """A run was created by a validated CreateRun."""

    eventType: Literal["run.created"] = "run.created"
    schemaVersion: Literal[1] = 1
    payload: RunCreatedPayload


class RunFailedPayload(Record):
    """Payload of RunFailed."""

    errorClass: Annotated[str, StringConstraints(pattern=r"^[a-z][a-z0-9_]*$")]
    detail: str = ""


class RunFailed(EventBase):
    """The run ended in failure."""

    eventType: Literal["run.failed"] = "run.failed"
    schemaVersion: Literal[1] = 1
    payload: RunFailedPayload


class RunMigratedPayload(Record):
    """Payload of RunMigrated."""

    fromVersions: RunVersions
    toVersions: RunVersions
    actor: Actor


class RunMigrated(EventBase):
    """The run moved explicitly to new versions."""

    eventType: Literal["run.migrated"] = "run.migrated"
    schemaVersion: Literal[1] = 1
    payload: RunMigratedPayload


class RunNeedsReviewPayload(Record):
    """Payload of RunNeedsReview."""

    reason: ReviewReason
    detail: str = ""
    attemptedPath: tuple[str, ...] = ()


class RunNeedsReview(EventBase):
    """The run waits for a person; no more tries."""

    eventType: Literal["run.needs_review"] = "run.needs_review"
    schemaVersion: Literal[2] = 2
    payload: RunNeedsReviewPayload


class RunPausedPayload(Record):
    """Payload of RunPaused."""

    reason: PauseReason
    detail: str = ""
    approvalId: str | None = None
    actor: Actor | None = None


class RunPaused(EventBase):
    """The run stopped taking new steps until resumed."""

    eventType: Literal["run.paused"] = "run.paused"
    schemaVersion: Literal[1] = 1
    payload: RunPausedPayload


class RunResumedPayload(Record):
    """Payload of RunResumed."""

    approvalId: str | None = None
    actor: Actor | None = None


class RunResumed(EventBase):
    """The run continues after a pause."""

    eventType: Literal["run.resumed"] = "run.resumed"
    schemaVersion: Literal[1] = 1
    payload: RunResumedPayload


class RunStartedPayload(Record):
    """Payload of RunStarted."""

    versions: RunVersions


class RunStarted(EventBase):
    """The run started working on the given versions."""

    eventType: Literal["run.started"] = "run.started"
    schemaVersion: Literal[1] = 1
    payload: RunStartedPayload


class SubjectErasedPayload(Record):
    """Payload of SubjectErased."""

    subjectRef: str
    requestRef: str
    actor: Actor


class SubjectErased(EventBase):
    """A data subject's keys are erased: its sealed fields read [erased]."""

    eventType: Literal["subject.erased"] = "subject.erased"
    schemaVersion: Literal[1] = 1
    payload: SubjectErasedPayload


class ToolCallAcceptedPayload(Record):
    """Payload of ToolCallAccepted."""

    toolCallId: str
    attempt: int
    externalRequestId: str


class ToolCallAccepted(EventBase):
    """The tool acknowledged the request."""

    eventType: Literal["tool.call.accepted"] = "tool.call.accepted"
    schemaVersion: Literal[1] = 1
    payload: ToolCallAcceptedPayload


class ToolCallAuthorizedPayload(Record):
    """Payload of ToolCallAuthorized."""

    toolCallId: str
    argsHash: str
    approvalId: str | None = None
    leaseEpoch: int | None = None


class ToolCallAuthorized(EventBase):
    """Policy or an approval allowed the call."""

    eventType: Literal["tool.call.authorized"] = "tool.call.authorized"
    schemaVersion: Literal[2] = 2
    payload: ToolCallAuthorizedPayload


class ToolCallCompletedPayload(Record):
    """Payload of ToolCallCompleted."""

    toolCallId: str
    attempt: int
    externalRequestId: str
    resultRef: str
    resultHash: str
    result: str | None = None


class ToolCallCompleted(EventBase):
    """The tool reported completion (not proof of domain reality)."""

    eventType: Literal["tool.call.completed"] = "tool.call.completed"
    schemaVersion: Literal[2] = 2
    payload: ToolCallCompletedPayload


class ToolCallDispatchingPayload(Record):
    """Payload of ToolCallDispatching."""

    toolCallId: str
    attempt: int
    idempotencyKey: str
    externalRequestId: str
    leaseEpoch: int


class ToolCallDispatching(EventBase):
    """A dispatcher claimed the call."""

    eventType: Literal["tool.call.dispatching"] = "tool.call.dispatching"
    schemaVersion: Literal[1] = 1
    payload: ToolCallDispatchingPayload


class ToolCallFailedPayload(Record):
    """Payload of ToolCallFailed."""

    toolCallId: str
    attempt: int
    externalRequestId: str
    errorClass: Annotated[str, StringConstraints(pattern=r"^[a-z][a-z0-9_]*$")]
    retryable: bool
    detail: str = ""
    retryAfterMs: int | None = None


class ToolCallFailed(EventBase):
    """The tool reported a failure."""

    eventType: Literal["tool.call.failed"] = "tool.call.failed"
    schemaVersion: Literal[2] = 2
    payload: ToolCallFailedPayload


class ToolCallHeldPayload(Record):
    """Payload of ToolCallHeld."""

    toolCallId: str
    pauseId: str
    pausedBy: str
    reason: str = ""
    pausedAt: Millis


class ToolCallHeld(EventBase):
    """A call waits: its capability is paused (until it is resumed)."""

    eventType: Literal["tool.call.held"] = "tool.call.held"
    schemaVersion: Literal[1] = 1
    payload: ToolCallHeldPayload


class ToolCallProposedPayload(Record):
    """Payload of ToolCallProposed."""

    toolCallId: str
    argsHash: str
    argsRef: str
    target: str
    action: str
    risk: Risk
    summary: str
    businessKey: str | None = None
    display: ArgDisplay | None = None
    displayDigest: str | None = None


class ToolCallProposed(EventBase):
    """The agent proposed a side effect."""

    eventType: Literal["tool.call.proposed"] = "tool.call.proposed"
    schemaVersion: Literal[3] = 3
    payload: ToolCallProposedPayload


class ToolCallReconciledPayload(Record):
    """Payload of ToolCallReconciled."""

    toolCallId: str
    externalRequestId: str
    outcome: ReconcileOutcome
    resultRef: str | None = None
    resultHash: str | None = None
    result: str | None = None


class ToolCallReconciled(EventBase):
    """What the external system said."""

    eventType: Literal["tool.call.reconciled"] = "tool.call.reconciled"
    schemaVersion: Literal[2] = 2
    payload: ToolCallReconciledPayload


class ToolCallReconciliationRequestedPayload(Record):
    """Payload of ToolCallReconciliationRequested."""

    toolCallId: str
    externalRequestId: str
    deadline: Millis | None = None


class ToolCallReconciliationRequested(EventBase):
    """Query the external system by externalRequestId."""

    eventType: Literal["tool.call.reconciliation_requested"] = "tool.call.reconciliation_requested"
    schemaVersion: Literal[1] = 1
    payload: ToolCallReconciliationRequestedPayload


class ToolCallResultUnknownPayload(Record):
    """Payload of ToolCallResultUnknown."""

    toolCallId: str
    attempt: int
    externalRequestId: str
    lastError: str = ""


class ToolCallResultUnknown(EventBase):
    """The response was lost: recover by reconciliation, never blind retry."""

    eventType: Literal["tool.call.result_unknown"] = "tool.call.result_unknown"
    schemaVersion: Literal[1] = 1
    payload: ToolCallResultUnknownPayload


class ToolCallRetryRequestedPayload(Record):
    """Payload of ToolCallRetryRequested."""

    toolCallId: str
    actor: Actor


class ToolCallRetryRequested(EventBase):
    """A person asked to retry a retryable failed call."""

    eventType: Literal["tool.call.retry_requested"] = "tool.call.retry_requested"
    schemaVersion: Literal[1] = 1
    payload: ToolCallRetryRequestedPayload


class ToolPausedPayload(Record):
    """Payload of ToolPaused."""

    reason: str
    actor: Actor


class ToolPaused(EventBase):
    """A capability (the envelope's capabilityId) is paused for the whole fleet."""

    eventType: Literal["tool.paused"] = "tool.paused"
    schemaVersion: Literal[1] = 1
    payload: ToolPausedPayload


class ToolResumedPayload(Record):
    """Payload of ToolResumed."""

    reason: str = ""
    actor: Actor


class ToolResumed(EventBase):
    """A paused capability (the envelope's capabilityId) is resumed."""

    eventType: Literal["tool.resumed"] = "tool.resumed"
    schemaVersion: Literal[1] = 1
    payload: ToolResumedPayload


class TurnCompletedPayload(Record):
    """Payload of TurnCompleted."""

    turnNumber: int


class TurnCompleted(EventBase):
    """A turn ended (turnId in the envelope)."""

    eventType: Literal["turn.completed"] = "turn.completed"
    schemaVersion: Literal[1] = 1
    payload: TurnCompletedPayload


class TurnStartedPayload(Record):
    """Payload of TurnStarted."""

    turnNumber: int


class TurnStarted(EventBase):
    """A turn began (turnId in the envelope)."""

    eventType: Literal["turn.started"] = "turn.started"
    schemaVersion: Literal[1] = 1
    payload: TurnStartedPayload


class VerificationUpdatedPayload(Record):
    """Payload of VerificationUpdated."""

    toolCallId: str
    status: VerificationStatus
    evidenceRef: str | None = None


class VerificationUpdated(EventBase):
    """Verification track of a tool call."""

    eventType: Literal["verification.updated"] = "verification.updated"
    schemaVersion: Literal[1] = 1
    payload: VerificationUpdatedPayload


class VersionDrainedPayload(Record):
    """Payload of VersionDrained."""

    dimension: str
    version: str
    undo: bool = False
    reason: str = ""
    actor: Actor


class VersionDrained(EventBase):
    """A partition's decider stopped (or, undone, resumed) new runs on a version."""

    eventType: Literal["version.drained"] = "version.drained"
    schemaVersion: Literal[1] = 1
    payload: VersionDrainedPayload


Event = Annotated[
    ApprovalConsumed
    | ApprovalExpired
    | ApprovalGranted
    | ApprovalInvalidated
    | ApprovalRejected
    | ApprovalRequired
    | BudgetDebited
    | BudgetExceeded
    | CheckpointSaved
    | CheckpointsArchived
    | ChildRunReported
    | ChildRunRequested
    | CommandRejected
    | CompensationPlanned
    | CompensationResolved
    | CompensationStarted
    | EvidenceAppended
    | EvidenceConflictDetected
    | EvidenceMerged
    | FeedbackRecorded
    | GrantRevoked
    | MemoryConfirmed
    | MemoryExpired
    | MemoryProposed
    | MemoryRejected
    | MemoryRevoked
    | ParentLinked
    | ProgressUpdated
    | ReasoningRecorded
    | RunArchived
    | RunCancelRequested
    | RunCancelled
    | RunCompensated
    | RunCompleted
    | RunCreated
    | RunFailed
    | RunMigrated
    | RunNeedsReview
    | RunPaused
    | RunResumed
    | RunStarted
    | SubjectErased
    | ToolCallAccepted
    | ToolCallAuthorized
    | ToolCallCompleted
    | ToolCallDispatching
    | ToolCallFailed
    | ToolCallHeld
    | ToolCallProposed
    | ToolCallReconciled
    | ToolCallReconciliationRequested
    | ToolCallResultUnknown
    | ToolCallRetryRequested
    | ToolPaused
    | ToolResumed
    | TurnCompleted
    | TurnStarted
    | VerificationUpdated
    | VersionDrained,
    Field(discriminator="eventType"),
]
"""Any current event, discriminated on eventType."""


EVENT_CLASSES: dict[str, type[EventBase]] = {
    "approval.consumed": ApprovalConsumed,
    "approval.expired": ApprovalExpired,
    "approval.granted": ApprovalGranted,
    "approval.invalidated": ApprovalInvalidated,
    "approval.rejected": ApprovalRejected,
    "approval.required": ApprovalRequired,
    "budget.debited": BudgetDebited,
    "budget.exceeded": BudgetExceeded,
    "checkpoint.saved": CheckpointSaved,
    "checkpoint.archived": CheckpointsArchived,
    "child.reported": ChildRunReported,
    "child.requested": ChildRunRequested,
    "command.rejected": CommandRejected,
    "compensation.planned": CompensationPlanned,
    "compensation.resolved": CompensationResolved,
    "compensation.started": CompensationStarted,
    "evidence.appended": EvidenceAppended,
    "evidence.conflict_detected": EvidenceConflictDetected,
    "evidence.merged": EvidenceMerged,
    "feedback.recorded": FeedbackRecorded,
    "grant.revoked": GrantRevoked,
    "memory.confirmed": MemoryConfirmed,
    "memory.expired": MemoryExpired,
    "memory.proposed": MemoryProposed,
    "memory.rejected": MemoryRejected,
    "memory.revoked": MemoryRevoked,
    "run.parent_linked": ParentLinked,
    "progress.updated": ProgressUpdated,
    "reasoning.recorded": ReasoningRecorded,
    "run.archived": RunArchived,
    "run.cancel_requested": RunCancelRequested,
    "run.cancelled": RunCancelled,
    "run.compensated": RunCompensated,
    "run.completed": RunCompleted,
    "run.created": RunCreated,
    "run.failed": RunFailed,
    "run.migrated": RunMigrated,
    "run.needs_review": RunNeedsReview,
    "run.paused": RunPaused,
    "run.resumed": RunResumed,
    "run.started": RunStarted,
    "subject.erased": SubjectErased,
    "tool.call.accepted": ToolCallAccepted,
    "tool.call.authorized": ToolCallAuthorized,
    "tool.call.completed": ToolCallCompleted,
    "tool.call.dispatching": ToolCallDispatching,
    "tool.call.failed": ToolCallFailed,
    "tool.call.held": ToolCallHeld,
    "tool.call.proposed": ToolCallProposed,
    "tool.call.reconciled": ToolCallReconciled,
    "tool.call.reconciliation_requested": ToolCallReconciliationRequested,
    "tool.call.result_unknown": ToolCallResultUnknown,
    "tool.call.retry_requested": ToolCallRetryRequested,
    "tool.paused": ToolPaused,
    "tool.resumed": ToolResumed,
    "turn.completed": TurnCompleted,
    "turn.started": TurnStarted,
    "verification.updated": VerificationUpdated,
    "version.drained": VersionDrained,
}
