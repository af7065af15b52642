"""The authoritative run state (State) and `evolve`, the only way it changes.

`evolve(state, event) -> state` is pure and total over the event contract: every event type
has a case, and an event that cannot apply to the state it meets raises (a corrupt log is
a bug to surface, not to paper over). `version` counts the state-changing events applied;
`command.rejected` records the rejected command id for dedupe but leaves the version alone.
"""

from __future__ import annotations

from base64 import urlsafe_b64encode
from datetime import datetime
from functools import lru_cache
from hashlib import blake2b
from typing import Final, Literal

from pydantic import BaseModel, ConfigDict

from runfacts.schemas.common import (
    Actor,
    ArgDisplay,
    BudgetAmounts,
    ChildStatus,
    EvidenceItem,
    Risk,
    RunVersions,
    VerificationStatus,
)

RunStatus = Literal[
    "created", "running", "waiting_for_approval", "waiting_for_review", "needs_review",
    "cancelling", "completed", "failed", "cancelled", "compensating", "compensated",
]
TERMINAL: frozenset[str] = frozenset({"completed", "failed", "cancelled", "compensated"})
Execution = Literal[
    "proposed", "authorized", "dispatching", "accepted", "completed", "failed", "result_unknown",
]
IN_FLIGHT: frozenset[str] = frozenset({"dispatching", "accepted", "result_unknown"})
ApprovalStatus = Literal["open", "granted", "rejected", "expired", "invalidated", "consumed", "revoked"]
MemoryStatus = Literal["proposed", "confirmed", "rejected", "revoked", "expired"]
Reconciliation = Literal[
    "none", "requested", "found_completed", "found_failed", "not_found", "still_unknown",
]
DEDUPE_WINDOW = 256
"""Distinct command ids a run remembers for dedupe (the most recent), as digests."""
DIGEST_BYTES = 12
DIGEST_CHARS = 16
"""One dedupe window entry: `DIGEST_BYTES` of blake2b of the command id in url-safe base64
(exactly `DIGEST_CHARS` characters, no padding, nothing JSON escapes). A new id collides with one
of the window's 256 entries with probability 256 / 2**96 < 2**-88 per command."""
PATH_WINDOW = 32
ACTION_WINDOW = 256
"""Loop detection counts the most recently used distinct actions only (actionCounts' size)."""
KEEP_SETTLED = 32
"""Settled tool calls kept in full; older ones are compacted into `RunState.settledCalls`."""
STATE_FORMAT: Final = 8
"""The stored shape's version (`RunState.stateFormat`; migrations: `state_json.RUN_STATE`)."""
EVIDENCE_WINDOW = 128
"""Evidence-grade event ids a run keeps (the most recent), for memory confirmation."""
EVIDENCE_TYPES: frozenset[str] = frozenset({
    "tool.call.completed", "tool.call.failed", "tool.call.reconciled", "verification.updated",
    "reasoning.recorded", "feedback.recorded", "approval.granted", "approval.rejected",
    "run.completed", "run.failed", "run.cancelled",
})
"""The facts a memory candidate may cite as evidence (what happened, not what was asked)."""
FINAL_VERIFICATION: frozenset[str] = frozenset({"confirmed_success", "confirmed_failure", "inconclusive"})


class Frozen(BaseModel):
    """A frozen state value."""

    model_config = ConfigDict(frozen=True, extra="forbid")


class ApprovalState(Frozen):
    """One approval request and where it stands."""

    approvalId: str
    toolCallId: str
    argsHash: str
    risk: Risk
    requiredRole: str
    expiresAt: datetime
    summary: str
    status: ApprovalStatus = "open"
    requesters: tuple[str, ...]
    """Every subject the request stands for (`policy.access.requesters`: the run's user, its creator
    when a person); without self-approval none of them may decide it."""
    decidedBy: str | None = None
    decidedAt: datetime | None = None
    displayDigest: str | None = None  # what the approver is shown (the call's display); None: no display


class CallHold(Frozen):
    """Why an authorized call waits: its capability is paused for the fleet (`tool.call.held`)."""

    pauseId: str  # the eventId of the `tool.paused` fact
    pausedBy: str
    reason: str = ""
    pausedAt: datetime


class ToolCallState(Frozen):
    """One tool call on both tracks: execution and verification."""

    toolCallId: str
    capabilityId: str
    action: str
    target: str
    argsHash: str
    argsRef: str
    risk: Risk
    summary: str
    idempotencyKey: str
    execution: Execution = "proposed"
    verification: VerificationStatus = "not_observed"
    closedReason: str | None = None  # why a call that never ran will never run
    approvalId: str | None = None
    attempts: int = 0
    externalRequestId: str | None = None
    leaseEpoch: int = 0
    revoked: bool = False  # its run-scoped grant (authorization, approval, lease) ended with the run
    reconciliation: Reconciliation = "none"
    reconcileDeadline: datetime | None = None
    errorClass: str | None = None
    retryable: bool | None = None
    lastError: str | None = None
    resultRef: str | None = None  # the ref of the result (the value travels on the events only)
    turnId: str | None = None
    reasoningObjectId: str | None = None
    proposedAt: datetime
    claimableSince: datetime | None = None  # when it last became ready for a claim
    dispatchedAt: datetime | None = None
    acceptedAt: datetime | None = None
    finishedAt: datetime | None = None
    # the arguments as the decider validated them (docs/decisions/argument-display.md)
    display: ArgDisplay | None = None
    displayDigest: str | None = None  # the dispatcher refuses stored arguments that render otherwise
    # its capability is paused: no new attempt until it is resumed (docs/dispatcher.md "Paused capabilities")
    held: CallHold | None = None

    @property
    def in_flight(self) -> bool:
        """Dispatched, outcome not settled, and not closed by a cancellation."""
        return self.execution in IN_FLIGHT and self.closedReason is None

    @property
    def awaiting_claim(self) -> bool:
        """Authorized (or reconciled not_found after a lost response), not closed: a
        dispatcher's next step is a claim, which needs a valid authorization."""
        ready = self.execution == "authorized" or (
            self.execution == "result_unknown" and self.reconciliation == "not_found")
        return ready and self.closedReason is None

    @property
    def settled(self) -> bool:
        """Nothing can happen to this call any more: closed before it ran, completed with a
        final verification, or failed with no retry left to it (not retryable, or closed).
        A closed result_unknown call is not settled: a late reconciliation may still end it."""
        if self.execution in ("proposed", "authorized"):
            return self.closedReason is not None
        if self.execution == "completed":
            return self.verification in FINAL_VERIFICATION
        if self.execution == "failed":
            return self.retryable is not True or self.closedReason is not None
        return False

    def outcome(self) -> tuple[str, str]:
        """(how it ended, argsHash prefix): what `RunState.settledCalls` keeps of a settled call."""
        how = self.closedReason or (f"completed/{self.verification}" if self.execution == "completed"
                                    else f"failed/{self.errorClass}")
        return how, self.argsHash[:16]


class Budget(Frozen):
    """Limits and what has been used; used never exceeds a limit (0 = unlimited)."""

    limits: BudgetAmounts
    used: BudgetAmounts = BudgetAmounts()
    reserved: BudgetAmounts = BudgetAmounts()
    """Held for live child runs (their sub-budgets): `used + reserved` never passes a limit."""


class Checkpoint(Frozen):
    """The last recovery checkpoint (optimises recovery; not durable execution)."""

    node: str
    stateHash: str
    versions: RunVersions
    savedAt: datetime


class MemoryCandidate(Frozen):
    """A memory the run proposed and where its review stands (refs and hashes only)."""

    memoryId: str
    statementRef: str
    statementHash: str
    evidence: tuple[str, ...]
    scopeTenant: str
    scopeKind: str
    scopeId: str
    expiresAt: datetime
    candidateHash: str
    proposedBy: str
    proposedAt: datetime
    status: MemoryStatus = "proposed"
    decidedBy: str | None = None
    decidedAt: datetime | None = None


LIVE_CHILD: frozenset[str] = frozenset({"requested", "needs_review"})
"""A child in these has not reported its end: its reservation is held."""
EVIDENCE_MAX = 256
"""Evidence items a run's ledger holds at most (a report carries them all: the intake's item limit)."""


class ChildState(Frozen):
    """A child run as its parent knows it (docs/decisions/0012-child-runs.md)."""

    childRunId: str
    reserved: BudgetAmounts
    status: ChildStatus = "requested"
    reason: str = ""
    used: BudgetAmounts = BudgetAmounts()

    @property
    def live(self) -> bool:
        return self.status in LIVE_CHILD


class CompensationPlan(Frozen):
    """How a completed call would be undone (`compensation.planned`), and whether it is being undone."""

    toolCallId: str  # the completed call
    capabilityId: str  # the compensating capability
    target: str
    summary: str
    arguments: str | None = None  # canonical JSON of the compensating call's arguments
    problem: str | None = None  # why they cannot be derived (a person undoes the effect)
    compensationToolCallId: str | None = None  # set when its compensation started
    retries: int = 0  # a person's `retry` decisions (`compensation.resolved`): the next id is `-undo-<retries+1>`
    resolution: Literal["done_by_hand", "given_up"] | None = None  # a person's other decisions


class Progress(Frozen):
    """The Progress Contract: verified items, open items, next safe action."""

    verifiedItems: tuple[str, ...] = ()
    openItems: tuple[str, ...] = ()
    nextSafeAction: str = ""


class RunState(Frozen):
    """Everything the runtime knows as fact about one run."""

    stateFormat: Literal[8] = STATE_FORMAT
    """The version of this shape as stored (first key of the JSON; not `version`, which counts
    events, nor `versions.stateSchema`, the run's pinned contract). A stored record is read with
    `state_json.load_state`, which migrates older shapes."""
    runId: str
    status: RunStatus = "running"
    version: int = 0
    tenant: str | None = None
    createdBy: Actor
    userId: str
    goalRef: str
    goalSummary: str
    createdAt: datetime
    updatedAt: datetime
    statusSince: datetime
    statusReason: str | None = None
    versions: RunVersions
    checkpoint: Checkpoint | None = None
    activeTurnId: str | None = None
    turnCount: int = 0
    approvals: dict[str, ApprovalState] = {}
    toolCalls: dict[str, ToolCallState] = {}
    settledCalls: dict[str, tuple[str, str]] = {}
    """Compacted tool calls: id -> `ToolCallState.outcome()` (their history is in the log)."""
    budget: Budget
    progress: Progress = Progress()
    recentCommandDigests: str = ""
    """The dedupe window: `command_digest` of the last `DEDUPE_WINDOW` distinct command ids, oldest
    first, concatenated (one string of `DIGEST_CHARS`-character entries; read it with `seen`)."""
    actionCounts: dict[str, int] = {}
    attemptedPath: tuple[str, ...] = ()
    lastError: str | None = None
    archived: bool = False
    checkpointsArchived: bool = False
    """A `checkpoint.archived` marker was written: no checkpoint of the run serves recovery."""
    evidence: tuple[str, ...] = ()
    """Ids of the run's evidence-grade events (`EVIDENCE_TYPES`), the last `EVIDENCE_WINDOW`."""
    memories: dict[str, MemoryCandidate] = {}
    parentRunId: str | None = None
    """The run that started this one as its child (None: a top-level run)."""
    children: dict[str, ChildState] = {}
    evidenceItems: dict[str, EvidenceItem] = {}
    """The evidence ledger: id -> item (own appends and merged children's); never overwritten."""
    compensations: dict[str, CompensationPlan] = {}
    """Completed calls whose capability declares a compensation, in the order they completed
    (kept whole: the compaction of settled calls does not touch them)."""
    compensating: str | None = None
    """Why the run compensates (run_cancelled, run_failed), from its first `compensation.started`."""

    @property
    def terminal(self) -> bool:
        return self.status in TERMINAL

    def open_approvals(self) -> list[ApprovalState]:
        """Approvals still waiting for a decision, oldest first."""
        return [a for a in self.approvals.values() if a.status == "open"]

    def lapsed_grant(self, call: ToolCallState, at: datetime) -> ApprovalState | None:
        """The call's granted (or consumed) approval when it has expired by `at`: the grant
        no longer authorizes a dispatch attempt (SEMANTICS.md §6)."""
        approval = self.approvals.get(call.approvalId or "")
        if approval is None or approval.status not in ("granted", "consumed") or at < approval.expiresAt:
            return None
        return approval

    def live_children(self) -> list[ChildState]:
        """Children that have not reported their end."""
        return [c for c in self.children.values() if c.live]

    def in_flight_calls(self) -> list[ToolCallState]:
        """Tool calls dispatched whose outcome is not settled yet."""
        return [c for c in self.toolCalls.values() if c.in_flight]

    def seen(self, command_id: str) -> bool:
        """`command_id` is in the dedupe window (one of the last `DEDUPE_WINDOW` distinct ids)."""
        return window_holds(self.recentCommandDigests, command_digest(command_id))


@lru_cache(maxsize=1024)
def command_digest(command_id: str) -> str:
    """A command id's dedupe window entry (`DIGEST_CHARS` url-safe base64 characters). Cached: a
    command's id is digested by `seen` and again for each of its events by the fold."""
    return urlsafe_b64encode(blake2b(command_id.encode(), digest_size=DIGEST_BYTES).digest()).decode()


def window_holds(window: str, digest: str) -> bool:
    """`digest` is one of `window`'s entries (found at an entry boundary, not across two)."""
    at = window.find(digest)
    while at >= 0:
        if at % DIGEST_CHARS == 0:
            return True
        at = window.find(digest, at + 1)
    return False


def window_with(window: str, digest: str) -> str:
    """`window` with `digest` appended as its newest entry, the oldest dropped past `DEDUPE_WINDOW`."""
    return (window + digest)[-DEDUPE_WINDOW * DIGEST_CHARS:]
