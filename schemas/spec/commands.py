"""Command payloads at their current version (requests the run decider validates)."""

from __future__ import annotations

from typing import Any

from runfacts.schemas.spec import versions
from runfacts.schemas.spec.children import CHILD_COMMANDS
from runfacts.schemas.spec.compensation import COMPENSATION_COMMANDS
from runfacts.schemas.spec.fields import (
    ARG_DISPLAY,
    BOOLEAN,
    BUDGET,
    DECISION,
    INT,
    LONG,
    OUTCOME,
    RISK,
    SNAKE_CASE,
    STRING,
    TIMER_KIND,
    TIMESTAMP,
    VERIFICATION,
    VERSIONS,
    TypeSpec,
    f,
    many,
    opt,
)


def command(name: str, type_name: str, doc: str, fields: list[dict[str, Any]],
            version: int = 1) -> TypeSpec:
    """One command type."""
    return TypeSpec("command", name, type_name, version, doc, tuple(fields))


def _call(*extra: dict[str, Any]) -> list[dict[str, Any]]:
    """Fields every dispatcher report shares."""
    return [f("toolCallId", STRING), f("attempt", INT), f("externalRequestId", STRING), *extra]


_RESULT = opt("result", STRING, "Canonical JSON of the tool's typed result (size-capped; "
              "null when the tool gives none). v1: absent.", pii=True)

_CONTROL = [
    command("CreateRun", "run.create", "Create a run (Control).", [
        f("goalRef", STRING),
        f("goalSummary", STRING, pii=True),
        f("userId", STRING, pii=True),
        opt("tenant", STRING),
        f("budget", BUDGET, "Budget limits."),
        f("versions", VERSIONS),
    ]),
    command("ResumeRun", "run.resume", "Decide a pending approval (Control).", [
        f("approvalId", STRING),
        f("decision", DECISION),
        f("argsHash", STRING, "Hash of the arguments the approver saw."),
        opt("approvalToken", STRING, "Signed token the decider's shell verifies; never stored."),
        opt("displayDigest", STRING, "Digest of the argument display the approver saw (null: the "
                                     "approval had none). v1: absent."),
    ], version=2),  # v2: displayDigest
    command("StopRun", "run.stop", "Stop taking new steps (Control).", [
        f("reason", STRING, default="", pii=True),
    ]),
    command("RetryToolCall", "tool.call.retry", "Retry a retryable failed call (Control).", [
        f("toolCallId", STRING),
    ]),
    command("CancelRun", "run.cancel", "Start cancellation (Control).", [
        f("reason", STRING, default="", pii=True),
    ]),
    command("RecordFeedback", "feedback.record", "Record feedback (Control).", [
        f("feedbackId", STRING),
        f("rating", INT),
        opt("comment", STRING, pii=True),
        opt("targetTurnId", STRING),
        opt("targetToolCallId", STRING),
        opt("targetReasoningObjectId", STRING),
    ]),
]

_HARNESS = [
    command("StartTurn", "turn.start", "Begin a turn (agent harness).", [f("turnId", STRING)]),
    command("CompleteTurn", "turn.complete", "End a turn (agent harness).", [f("turnId", STRING)]),
    command("RecordReasoning", "reasoning.record", "Record why (refs and hashes only).", [
        f("reasoningObjectId", STRING),
        opt("turnId", STRING),
        f("goalRef", STRING),
        many("evidenceRefs", STRING),
        f("conclusionHash", STRING),
        opt("conclusionRef", STRING),
    ]),
    command("ProposeToolCall", "tool.call.propose", "Propose a side effect (agent harness).", [
        f("toolCallId", STRING),
        f("capabilityId", STRING),
        opt("turnId", STRING),
        opt("reasoningObjectId", STRING),
        f("argsHash", STRING),
        f("argsRef", STRING),
        f("target", STRING),
        f("action", STRING),
        f("risk", RISK),
        f("summary", STRING, "Plain words: what the call would do.", pii=True),
        opt("businessKey", STRING, "Business idempotency key, e.g. ticket:T-9001: sent to the tool as its "
                                   "idempotency key (tenant-scoped) instead of the per-run key."),
        opt("display", ARG_DISPLAY, "The arguments as the tool's schema names them, rendered by the client "
                                    "from the stored arguments; the decider validates them and evaluates the "
                                    "capability's approval rule on them. v1-v2: absent."),
    ], version=3),  # v2: businessKey; v3: display
    command("SaveCheckpoint", "checkpoint.save", "Save a recovery checkpoint.", [
        f("node", STRING), f("stateHash", STRING), f("versions", VERSIONS),
    ]),
    command("DebitBudget", "budget.debit", "Debit budget for a model or tool step.", [
        f("amounts", BUDGET), f("actionHash", STRING),
    ]),
    command("UpdateProgress", "progress.update", "Update the Progress Contract.", [
        many("verifiedItems", STRING), many("openItems", STRING), f("nextSafeAction", STRING),
    ]),
    command("CompleteRun", "run.complete", "End the run successfully.", [
        opt("outcomeRef", STRING),
    ]),
    command("FailRun", "run.fail", "End the run in failure.", [
        f("errorClass", STRING, pattern=SNAKE_CASE),
        f("detail", STRING, default="", pii=True),
    ]),
]

_DISPATCHER = [
    command("ClaimToolCall", "tool.call.claim", "Claim an authorized call before calling it.", [
        f("toolCallId", STRING),
        f("attempt", INT),
        f("idempotencyKey", STRING),
        f("externalRequestId", STRING),
        f("leaseEpoch", LONG),
    ]),
    command("ReportToolAccepted", "tool.call.report_accepted", "The tool acknowledged.",
            _call()),
    command("ReportToolCompleted", "tool.call.report_completed", "The tool completed.",
            _call(f("resultRef", STRING), f("resultHash", STRING), _RESULT,
                  opt("verification", VERIFICATION, "The call's verification when the dispatcher already knows "
                      "it (the tool answered this process: confirmed_success), recorded with the completion "
                      "instead of polled for later; null: pending, to be verified. v1-v2: absent.")),
            version=3),
    command("ReportToolFailed", "tool.call.report_failed", "The tool failed.", _call(
        f("errorClass", STRING, pattern=SNAKE_CASE),
        f("retryable", BOOLEAN),
        f("message", STRING, default="", pii=True),
    )),
    command("ReportResultUnknown", "tool.call.report_result_unknown", "The response was lost.",
            _call(f("lastError", STRING, default="", pii=True))),
    command("RequestReconciliation", "tool.call.request_reconciliation",
            "Ask to reconcile a call whose outcome is unknown.", [
        f("toolCallId", STRING), f("externalRequestId", STRING),
    ]),
    command("ReportReconciled", "tool.call.report_reconciled", "What reconciliation found.", [
        f("toolCallId", STRING),
        f("externalRequestId", STRING),
        f("outcome", OUTCOME),
        opt("resultRef", STRING),
        opt("resultHash", STRING),
        _RESULT,
    ], version=2),
    command("ReportVerification", "tool.call.report_verification", "Verification observed.", [
        f("toolCallId", STRING), f("status", VERIFICATION), opt("evidenceRef", STRING),
    ]),
]

_DECIDER = [
    command("FireTimer", "timer.fire", "A decider timer fell due.", [
        f("timerId", STRING),
        f("kind", TIMER_KIND),
        f("targetId", STRING, "Approval, tool call, run or memory the timer guards."),
        f("dueAt", TIMESTAMP),
    ], version=3),  # v2: kind claim_deadline; v3: kind memory_expiry
    command("ArchiveRun", "run.archive", "Archive a finished run.", [
        opt("checkpointRef", STRING),
    ]),
    command("MigrateRun", "run.migrate", "Move a paused run to new versions explicitly.", [
        f("versions", VERSIONS),
        opt("toNode", STRING, "The node the run resumes from (its checkpoint's); null: `migrated`. v1: absent."),
    ], version=2),  # v2: toNode (runfacts runs migrate --to-node)
]


_MEMORY = [
    command("ProposeMemory", "memory.propose", "Propose what the run learned as a memory candidate.", [
        f("memoryId", STRING, "memory-<...>: never an approval id (their tokens share a format)."),
        f("statementRef", STRING, "Reference to the statement, never its text."),
        f("statementHash", STRING),
        many("evidence", STRING, "Event ids of the run that support the statement."),
        f("scopeTenant", STRING),
        f("scopeKind", STRING, "capability or topic.", pattern=SNAKE_CASE),
        f("scopeId", STRING),
        f("expiresAt", TIMESTAMP, "Mandatory."),
        opt("summary", STRING, pii=True),
    ]),
    command("ReviewMemory", "memory.review", "Confirm or reject a memory candidate (reviewer).", [
        f("memoryId", STRING, "memory-<...>: never an approval id (their tokens share a format)."),
        f("decision", DECISION),
        f("candidateHash", STRING, "Hash of the candidate the reviewer saw."),
        opt("reviewToken", STRING, "Signed token (the approval token format); never stored."),
    ]),
    command("RevokeMemory", "memory.revoke", "Withdraw a memory or a candidate.", [
        f("memoryId", STRING, "memory-<...>: never an approval id (their tokens share a format)."),
        f("reason", STRING, default="", pii=True),
    ]),
]

_PRIVACY = [  # crypto-shredding (ADR 0009): the subject is named by its reference, never its id
    command("EraseSubject", "subject.erase", "Erase a data subject's keys (operator; right to erasure).", [
        f("subjectRef", STRING, "The subject's reference (keyed digest, runfacts.privacy); never its id."),
        f("requestRef", STRING, "The erasure request's reference (e.g. a ticket id); no personal data."),
    ]),
]

COMMANDS: tuple[TypeSpec, ...] = tuple(_CONTROL + _HARNESS + _DISPATCHER + _DECIDER + _MEMORY + _PRIVACY
                                       + versions.COMMANDS + CHILD_COMMANDS
                                       + COMPENSATION_COMMANDS)
