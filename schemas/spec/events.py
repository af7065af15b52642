"""Event payloads at their current version (facts the run decider appends)."""

from __future__ import annotations

from typing import Any

from runfacts.schemas.spec import versions
from runfacts.schemas.spec.children import CHILD_EVENTS
from runfacts.schemas.spec.compensation import COMPENSATION_EVENTS
from runfacts.schemas.spec.fields import (
    ACTOR,
    ARG_DISPLAY,
    BOOLEAN,
    BUDGET,
    DIMENSION,
    INT,
    INVALIDATION,
    LONG,
    OUTCOME,
    PAUSE_REASON,
    REVIEW_REASON,
    RISK,
    SNAKE_CASE,
    STRING,
    TIMESTAMP,
    VERIFICATION,
    VERSIONS,
    TypeSpec,
    f,
    many,
    opt,
)


def event(name: str, type_name: str, doc: str, fields: list[dict[str, Any]],
          version: int = 1) -> TypeSpec:
    """One event type."""
    return TypeSpec("event", name, type_name, version, doc, tuple(fields))


def _call(*extra: dict[str, Any]) -> list[dict[str, Any]]:
    """Fields every dispatch-track event shares."""
    return [f("toolCallId", STRING), f("attempt", INT), f("externalRequestId", STRING), *extra]


_RESULT = opt("result", STRING, "Canonical JSON of the tool's typed result (size-capped; "
              "null when the tool gives none). v1: absent.", pii=True)

_DISPLAY = opt("display", ARG_DISPLAY, "The arguments as the decider validated them and as the approver "
                                      "sees them (null: proposed without a display). v1: absent.")
_DISPLAY_DIGEST = opt("displayDigest", STRING, "sha256 of the display (runfacts.processors.policy.display."
                                               "display_digest): the dispatcher refuses to run arguments that "
                                               "render otherwise. v1: absent.")

_RUN = [
    event("RunCreated", "run.created", "A run was created by a validated CreateRun.", [
        f("goalRef", STRING, "Reference to the goal, never the raw goal text."),
        f("goalSummary", STRING, "Short plain-words goal for the user view.", pii=True),
        f("userId", STRING, "User the run acts for.", pii=True),
        opt("tenant", STRING),
        f("budget", BUDGET, "Budget limits."),
        f("versions", VERSIONS),
        f("actor", ACTOR),
    ]),
    event("RunStarted", "run.started", "The run started working on the given versions.", [
        f("versions", VERSIONS),
    ]),
    event("RunPaused", "run.paused", "The run stopped taking new steps until resumed.", [
        f("reason", PAUSE_REASON),
        f("detail", STRING, default=""),
        opt("approvalId", STRING, "Approval the run waits for, if any."),
        opt("actor", ACTOR, "Who stopped the run, when a person did."),
    ]),
    event("RunResumed", "run.resumed", "The run continues after a pause.", [
        opt("approvalId", STRING, "Approval whose grant resumed the run, if any."),
        opt("actor", ACTOR),
    ]),
    event("RunNeedsReview", "run.needs_review", "The run waits for a person; no more tries.", [
        f("reason", REVIEW_REASON),
        f("detail", STRING, default=""),
        many("attemptedPath", STRING, "Nodes or (state, action) hashes tried, oldest first."),
    ], version=2),  # v2: reason unclaimed_tool_call
    event("RunCompleted", "run.completed", "The run ended successfully.", [
        opt("outcomeRef", STRING),
        many("pendingVerifications", STRING, "Tool calls handed off, verification pending."),
    ]),
    event("RunFailed", "run.failed", "The run ended in failure.", [
        f("errorClass", STRING, pattern=SNAKE_CASE),
        f("detail", STRING, default="", pii=True),
    ]),
    event("RunCancelRequested", "run.cancel_requested", "Cancellation began: no new work.", [
        f("reason", STRING, default="", pii=True),
        f("actor", ACTOR),
    ]),
    event("RunCancelled", "run.cancelled", "Cancellation finished: terminal.", [
        many("unresolvedToolCalls", STRING, "Calls whose outcome a person must still settle."),
    ]),
    event("RunArchived", "run.archived", "Run state archived; approvals closed.", [
        opt("checkpointRef", STRING),
    ]),
    event("RunMigrated", "run.migrated", "The run moved explicitly to new versions.", [
        f("fromVersions", VERSIONS),
        f("toVersions", VERSIONS),
        f("actor", ACTOR),
    ]),
    event("TurnStarted", "turn.started", "A turn began (turnId in the envelope).", [
        f("turnNumber", INT, "1-based position of the turn in the run."),
    ]),
    event("TurnCompleted", "turn.completed", "A turn ended (turnId in the envelope).", [
        f("turnNumber", INT),
    ]),
    event("ReasoningRecorded", "reasoning.recorded",
          "Why an action was proposed: refs and hashes only, never raw reasoning.", [
        f("goalRef", STRING),
        many("evidenceRefs", STRING),
        f("conclusionHash", STRING),
        opt("conclusionRef", STRING),
    ]),
]

_APPROVAL = [
    event("ApprovalRequired", "approval.required", "A tool call waits for a person's approval.", [
        f("approvalId", STRING),
        f("toolCallId", STRING),
        f("argsHash", STRING, "Hash of the exact arguments the approval binds to."),
        f("risk", RISK),
        f("requiredRole", STRING),
        f("expiresAt", TIMESTAMP),
        f("summary", STRING, "Plain words: what the approver is asked to allow.", pii=True),
        _DISPLAY,
        _DISPLAY_DIGEST,
        opt("proposedBy", ACTOR, "Who proposed the call (the proposing command's actor): a person counts as a "
                                 "requester of the approval (docs/security.md). v1: absent."),
    ], version=2),  # v2: display, displayDigest, proposedBy
    event("ApprovalGranted", "approval.granted", "An approver allowed the call.", [
        f("approvalId", STRING), f("toolCallId", STRING), f("argsHash", STRING),
        f("actor", ACTOR),
        _DISPLAY_DIGEST,
    ], version=2),  # v2: displayDigest (what the approver saw; the signed token covers it)
    event("ApprovalRejected", "approval.rejected", "An approver refused the call.", [
        f("approvalId", STRING), f("toolCallId", STRING), f("argsHash", STRING),
        f("actor", ACTOR),
    ]),
    event("ApprovalExpired", "approval.expired", "The approval was not decided in time.", [
        f("approvalId", STRING), f("toolCallId", STRING), f("expiresAt", TIMESTAMP),
    ]),
    event("ApprovalInvalidated", "approval.invalidated", "A pending approval can't be used.", [
        f("approvalId", STRING), f("toolCallId", STRING), f("reason", INVALIDATION),
        f("detail", STRING, default=""),
    ]),
    event("ApprovalConsumed", "approval.consumed", "A granted approval was used (at most once).", [
        f("approvalId", STRING), f("toolCallId", STRING),
    ]),
]

_TOOL = [
    event("ToolCallProposed", "tool.call.proposed", "The agent proposed a side effect.", [
        f("toolCallId", STRING),
        f("argsHash", STRING),
        f("argsRef", STRING, "Reference to the stored arguments."),
        f("target", STRING, "What the call acts on, e.g. order-001."),
        f("action", STRING, "What the call does, e.g. refund."),
        f("risk", RISK),
        f("summary", STRING, "Plain words: what the call would do.", pii=True),
        opt("businessKey", STRING, "The proposal's business idempotency key (null: the per-run key)."),
        _DISPLAY,
        _DISPLAY_DIGEST,
    ], version=3),  # v2: businessKey; v3: display, displayDigest
    event("ToolCallAuthorized", "tool.call.authorized", "Policy or an approval allowed the call.", [
        f("toolCallId", STRING),
        f("argsHash", STRING),
        opt("approvalId", STRING, "Null when policy allowed it without a person."),
        opt("leaseEpoch", LONG, "The dispatch lease the decider chose with the authorization (ADR "
            "0011): a `tool.call.dispatching` of this epoch follows in the same transaction and the "
            "dispatcher does not claim. Null: the dispatcher claims."),
    ], version=2),  # v2: leaseEpoch
    event("ToolCallDispatching", "tool.call.dispatching", "A dispatcher claimed the call.", [
        f("toolCallId", STRING),
        f("attempt", INT),
        f("idempotencyKey", STRING, "Stable key sent to the tool (run+action+target+args)."),
        f("externalRequestId", STRING),
        f("leaseEpoch", LONG, "Epoch of the dispatcher's lease; older epochs are fenced."),
    ]),
    event("ToolCallAccepted", "tool.call.accepted", "The tool acknowledged the request.",
          _call()),
    event("ToolCallCompleted", "tool.call.completed",
          "The tool reported completion (not proof of domain reality).",
          _call(f("resultRef", STRING), f("resultHash", STRING), _RESULT), version=2),
    event("ToolCallFailed", "tool.call.failed", "The tool reported a failure.", _call(
        f("errorClass", STRING, "e.g. timeout, rate_limited, server_error, permission.",
          pattern=SNAKE_CASE),
        f("retryable", BOOLEAN),
        f("detail", STRING, "What the tool said (v1: message).", default="", pii=True,
          aliases=("message",)),
        opt("retryAfterMs", LONG, "The tool's retry-after hint, when it gave one."),
    ), version=2),
    event("ToolCallResultUnknown", "tool.call.result_unknown",
          "The response was lost: recover by reconciliation, never blind retry.",
          _call(f("lastError", STRING, default="", pii=True))),
    event("ToolCallReconciliationRequested", "tool.call.reconciliation_requested",
          "Query the external system by externalRequestId.", [
        f("toolCallId", STRING),
        f("externalRequestId", STRING),
        opt("deadline", TIMESTAMP, "After this the call goes to review."),
    ]),
    event("ToolCallReconciled", "tool.call.reconciled", "What the external system said.", [
        f("toolCallId", STRING),
        f("externalRequestId", STRING),
        f("outcome", OUTCOME),
        opt("resultRef", STRING),
        opt("resultHash", STRING),
        _RESULT,
    ], version=2),
    event("ToolCallRetryRequested", "tool.call.retry_requested",
          "A person asked to retry a retryable failed call.", [
        f("toolCallId", STRING),
        f("actor", ACTOR),
    ]),
    event("VerificationUpdated", "verification.updated", "Verification track of a tool call.", [
        f("toolCallId", STRING),
        f("status", VERIFICATION),
        opt("evidenceRef", STRING),
    ]),
]

_OTHER = [
    event("CheckpointSaved", "checkpoint.saved", "A recovery checkpoint (not durable execution).", [
        f("node", STRING),
        f("stateHash", STRING),
        f("versions", VERSIONS),
    ]),
    event("BudgetDebited", "budget.debited", "A model or tool step used budget.", [
        f("amounts", BUDGET),
        f("actionHash", STRING, "Hash of the (state, action) pair; repeats reveal loops."),
    ]),
    event("BudgetExceeded", "budget.exceeded", "A budget dimension ran out.", [
        f("dimension", DIMENSION),
        f("limit", LONG),
        f("used", LONG),
    ]),
    event("ProgressUpdated", "progress.updated", "The run's Progress Contract.", [
        many("verifiedItems", STRING),
        many("openItems", STRING),
        f("nextSafeAction", STRING),
    ]),
    event("FeedbackRecorded", "feedback.recorded", "Feedback on a run, turn or call.", [
        f("feedbackId", STRING),
        f("rating", INT),
        opt("comment", STRING, pii=True),
        opt("targetTurnId", STRING),
        opt("targetToolCallId", STRING),
        opt("targetReasoningObjectId", STRING),
        f("actor", ACTOR),
    ]),
    event("CommandRejected", "command.rejected", "A command the run's state did not allow.", [
        f("commandId", STRING),
        f("commandType", STRING),
        f("reasonCode", STRING, pattern=SNAKE_CASE),
        f("detail", STRING, default=""),
        opt("expectedVersion", LONG),
        f("actualVersion", LONG),
    ]),
]

_SCOPE = [
    f("scopeTenant", STRING, "The tenant the memory is for (the run's tenant)."),
    f("scopeKind", STRING, "What the memory is about: capability or topic.", pattern=SNAKE_CASE),
    f("scopeId", STRING, "The capability id or topic name."),
]

_HYGIENE = [
    event("GrantRevoked", "grant.revoked", "A run-scoped grant ended with its run (run-end hygiene).", [
        f("toolCallId", STRING),
        opt("approvalId", STRING),
        f("grantKind", STRING, "approval (granted, not consumed), authorization (not claimed) or "
          "lease (a dispatch lease held at the run's end).", pattern=SNAKE_CASE),
        f("reason", STRING, "run_completed, run_failed, run_cancelled or run_archived.", pattern=SNAKE_CASE),
    ]),
    event("CheckpointsArchived", "checkpoint.archived",
          "The run's checkpoints serve no recovery any more: a retention marker stores honour.", [
        opt("node", STRING, "The last checkpoint's node (e.g. langgraph:<thread>:<id>)."),
        opt("stateHash", STRING),
        f("reason", STRING, pattern=SNAKE_CASE),
    ]),
]

_MEMORY = [
    event("MemoryProposed", "memory.proposed", "A run proposed a memory candidate (refs, never raw text).", [
        f("memoryId", STRING, "memory-<...>: never an approval id (their tokens share a format)."),
        f("statementRef", STRING, "Reference to the statement, never its text."),
        f("statementHash", STRING),
        many("evidence", STRING, "Event ids of the run that support the statement."),
        *_SCOPE,
        f("expiresAt", TIMESTAMP, "Mandatory: a memory is never forever."),
        f("candidateHash", STRING, "Hash of the candidate a reviewer's decision binds to."),
        opt("summary", STRING, "Short plain-words summary for the reviewer.", pii=True),
        f("actor", ACTOR),
    ]),
    event("MemoryConfirmed", "memory.confirmed", "A reviewer promoted a candidate to memory.", [
        f("memoryId", STRING, "memory-<...>: never an approval id (their tokens share a format)."),
        f("candidateHash", STRING),
        f("actor", ACTOR),
    ]),
    event("MemoryRejected", "memory.rejected", "A reviewer refused a candidate.", [
        f("memoryId", STRING, "memory-<...>: never an approval id (their tokens share a format)."),
        f("candidateHash", STRING),
        f("actor", ACTOR),
    ]),
    event("MemoryRevoked", "memory.revoked", "A memory (or candidate) may no longer be relied on.", [
        f("memoryId", STRING, "memory-<...>: never an approval id (their tokens share a format)."),
        f("reason", STRING, default="", pii=True),
        f("actor", ACTOR),
    ]),
    event("MemoryExpired", "memory.expired", "A memory (or candidate) reached its expiry (the decider's timer).", [
        f("memoryId", STRING, "memory-<...>: never an approval id (their tokens share a format)."),
        f("expiresAt", TIMESTAMP),
    ]),
]

_PRIVACY = [  # crypto-shredding (ADR 0009): the fact of an erasure, without the erased content
    event("SubjectErased", "subject.erased", "A data subject's keys are erased: its sealed fields read [erased].", [
        f("subjectRef", STRING, "The subject's reference (keyed digest, runfacts.privacy); never its id."),
        f("requestRef", STRING, "The erasure request's reference (e.g. a ticket id); no personal data."),
        f("actor", ACTOR),
    ]),
]

EVENTS: tuple[TypeSpec, ...] = tuple(_RUN + _APPROVAL + _TOOL + _OTHER + _HYGIENE + _MEMORY + _PRIVACY
                                     + versions.EVENTS + CHILD_EVENTS
                                     + COMPENSATION_EVENTS)
