"""Contract types, generated from schemas/avro by `runfacts schemas generate`: do not edit."""

from __future__ import annotations

from typing import Literal

from runfacts.schemas.base import Millis, Record


class EventEnvelope(Record):
    """The event envelope: every field but the payload."""

    eventId: str
    eventType: str
    runId: str
    turnId: str | None = None
    producer: str
    reasoningObjectId: str | None = None
    capabilityId: str | None = None
    correlationId: str
    causationId: str | None = None
    schemaVersion: int
    occurredAt: Millis


class EventBase(EventEnvelope):
    """Base of every event model."""

    payload: Record


class Actor(Record):
    """Who issued a command, as authenticated by the caller's shell."""

    subjectId: str
    roles: tuple[str, ...] = ()
    tenant: str | None = None
    authSource: str


InvalidationReason = Literal[
    "args_changed",
    "superseded",
    "run_cancelled",
    "run_ended",
    "policy_changed",
]
"""Why a pending approval can no longer be used."""


Risk = Literal[
    "low",
    "medium",
    "high",
    "critical",
]
"""Risk of a tool call."""


class ArgField(Record):
    """One argument as an approver sees it, named as the tool's schema names it."""

    name: str
    value: str | None = None
    personalValue: str | None = None
    unit: str | None = None
    pii: bool = False
    omittedChars: int = 0


class ArgDisplay(Record):
    """A tool call's arguments as an approver sees them (docs/tools.md)."""

    fields: tuple[ArgField, ...] = ()
    omittedFields: int = 0


class BudgetAmounts(Record):
    """Amounts of each budget dimension (limits or debits)."""

    steps: int = 0
    toolCalls: int = 0
    tokens: int = 0
    wallTimeMs: int = 0
    costMicros: int = 0


BudgetDimension = Literal[
    "steps",
    "tool_calls",
    "tokens",
    "wall_time",
    "cost",
]
"""One budget dimension."""


class RunVersions(Record):
    """Versions a run's trajectory depends on (checked on resume)."""

    stateSchema: str
    modelRoute: str
    toolManifest: str
    policy: str


ChildStatus = Literal[
    "requested",
    "needs_review",
    "completed",
    "failed",
    "cancelled",
    "refused",
]
"""Where a child run stands, as its parent knows it."""


class EvidenceItem(Record):
    """One piece of evidence: an id, the hash of its content, a reference."""

    evidenceId: str
    hash: str
    ref: str
    by: str


ReviewReason = Literal[
    "budget_exceeded",
    "loop_detected",
    "unresolved_side_effect",
    "incompatible_versions",
    "policy_denied",
    "retries_exhausted",
    "requested",
    "unclaimed_tool_call",
]
"""Why a run needs a person."""


PauseReason = Literal[
    "waiting_for_approval",
    "waiting_for_review",
    "incompatible_versions",
    "approval_expired",
    "stopped",
]
"""Why a run paused."""


ReconcileOutcome = Literal[
    "found_completed",
    "found_failed",
    "not_found",
    "still_unknown",
]
"""What querying the external system found."""


VerificationStatus = Literal[
    "not_observed",
    "pending",
    "confirmed_success",
    "confirmed_failure",
    "inconclusive",
]
"""Verification track of a tool call (domain reality)."""


class CommandEnvelope(Record):
    """The command envelope: every field but the payload."""

    commandId: str
    commandType: str
    runId: str
    expectedVersion: int | None = None
    actor: Actor
    issuedAt: Millis
    correlationId: str
    causationId: str | None = None
    schemaVersion: int


class CommandBase(CommandEnvelope):
    """Base of every command model."""

    payload: Record


TimerKind = Literal[
    "approval_expiry",
    "reconciliation_deadline",
    "wall_budget",
    "claim_deadline",
    "memory_expiry",
]
"""What a decider timer guards."""


ApprovalDecision = Literal[
    "approve",
    "reject",
]
"""An approver's decision."""
