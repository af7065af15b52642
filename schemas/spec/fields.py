"""The source the `.avsc` contract is generated from: envelope fields once, payload fields per type.

`runfacts schemas generate` writes `schemas/avro/<kind>s/<Name>.v<N>.avsc` for each type
whose version here is not shipped yet, and refuses to change a shipped file: a shipped
file is the wire contract and never changes. To evolve a type, edit its fields here and
bump its version (add fields with defaults, rename with aliases), then add an upcaster if
old values need more than Avro's schema resolution.

Conventions the generator and the models rely on:
- closed vocabularies are Avro enums in `runfacts.common` whose `default` is the cautious
  symbol (an unknown symbol reads as the one that makes a reader stop and ask);
- open vocabularies (error classes, reason codes) are strings with a `pattern` property;
- fields that may hold personal data carry `"pii": true`;
- optional ids are `["null", "string"]` with default null, never empty strings;
- arrays default to `[]`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

Kind = Literal["event", "command"]

STRING = "string"
INT = "int"
LONG = "long"
BOOLEAN = "boolean"
TIMESTAMP: dict[str, Any] = {"type": "long", "logicalType": "timestamp-millis"}
SNAKE_CASE = "^[a-z][a-z0-9_]*$"
COMMON_NAMESPACE = "runfacts.common"
NAMESPACES: dict[Kind, str] = {"event": "runfacts.events", "command": "runfacts.commands"}

_NO_DEFAULT = object()


@dataclass(frozen=True)
class Named:
    """A named Avro type defined once; each schema inlines it at first use, then names it."""

    fullname: str
    definition: dict[str, Any] = field(hash=False, compare=False)


@dataclass(frozen=True)
class TypeSpec:
    """The current version of one event or command type."""

    kind: Kind
    name: str
    type_name: str
    version: int
    doc: str
    fields: tuple[dict[str, Any], ...]


def f(name: str, type_: Any, doc: str = "", *, pii: bool = False, default: Any = _NO_DEFAULT,
      pattern: str | None = None, aliases: tuple[str, ...] = ()) -> dict[str, Any]:
    """One record field."""
    out: dict[str, Any] = {"name": name, "type": type_}
    if doc:
        out["doc"] = doc
    if default is not _NO_DEFAULT:
        out["default"] = default
    if aliases:
        out["aliases"] = list(aliases)
    if pattern:
        out["pattern"] = pattern
    if pii:
        out["pii"] = True
    return out


def opt(name: str, type_: Any, doc: str = "", *, pii: bool = False) -> dict[str, Any]:
    """An optional field: null when it does not apply."""
    return f(name, ["null", type_], doc, pii=pii, default=None)


def many(name: str, items: Any, doc: str = "", *, pii: bool = False) -> dict[str, Any]:
    """An array field, empty by default."""
    return f(name, {"type": "array", "items": items}, doc, pii=pii, default=[])


def record(name: str, doc: str, fields: list[dict[str, Any]]) -> Named:
    """A shared record type in the common namespace."""
    definition = {"type": "record", "name": name, "namespace": COMMON_NAMESPACE,
                  "doc": doc, "fields": fields}
    return Named(f"{COMMON_NAMESPACE}.{name}", definition)


def enum(name: str, doc: str, symbols: list[str], default: str) -> Named:
    """A closed vocabulary; `default` is the cautious reading of a symbol the reader lacks."""
    definition = {"type": "enum", "name": name, "namespace": COMMON_NAMESPACE, "doc": doc,
                  "symbols": symbols, "default": default}
    return Named(f"{COMMON_NAMESPACE}.{name}", definition)


ACTOR = record("Actor", "Who issued a command, as authenticated by the caller's shell.", [
    f("subjectId", STRING, "Authenticated user or service id.", pii=True),
    many("roles", STRING, "Roles the subject held when it acted."),
    opt("tenant", STRING, "Tenant the subject acted in."),
    f("authSource", STRING, "How the subject was authenticated, e.g. oidc, service, system."),
])
BUDGET = record("BudgetAmounts", "Amounts of each budget dimension (limits or debits).", [
    f("steps", LONG, default=0),
    f("toolCalls", LONG, default=0),
    f("tokens", LONG, default=0),
    f("wallTimeMs", LONG, default=0),
    f("costMicros", LONG, "Cost in millionths of the billing currency.", default=0),
])
VERSIONS = record("RunVersions", "Versions a run's trajectory depends on (checked on resume).", [
    f("stateSchema", STRING, "Version of the agent's state schema / graph."),
    f("modelRoute", STRING),
    f("toolManifest", STRING),
    f("policy", STRING),
])

ARG_FIELD = record("ArgField", "One argument as an approver sees it, named as the tool's schema names it.", [
    f("name", STRING, "The argument's name in the tool's argument schema."),
    opt("value", STRING, "Canonical JSON of the value, cut at the display cap (omittedChars says how much); "
                         "null for a personal field."),
    opt("personalValue", STRING, "The value of a personal field (pii in the tool's schema), as `value`: sealed "
                                 "by the privacy envelope, masked for roles that must not see it.", pii=True),
    opt("unit", STRING, "The unit the tool's schema declares, e.g. cents."),
    f("pii", BOOLEAN, "The field holds personal data: its value is in personalValue.", default=False),
    f("omittedChars", INT, "Characters of the value's JSON cut at the display cap (0: shown in full).",
      default=0),
])
ARG_DISPLAY = record("ArgDisplay", "A tool call's arguments as an approver sees them (docs/tools.md).", [
    many("fields", ARG_FIELD, "The arguments shown, in the order of the tool's schema."),
    f("omittedFields", INT, "Arguments not shown (over the display's field cap), counted.", default=0),
])

RISK = enum("Risk", "Risk of a tool call.", ["low", "medium", "high", "critical"], "critical")
DECISION = enum("ApprovalDecision", "An approver's decision.", ["approve", "reject"], "reject")
PAUSE_REASON = enum(
    "PauseReason", "Why a run paused.",
    ["waiting_for_approval", "waiting_for_review", "incompatible_versions", "approval_expired",
     "stopped"], "waiting_for_review")
REVIEW_REASON = enum(
    "ReviewReason", "Why a run needs a person.",
    ["budget_exceeded", "loop_detected", "unresolved_side_effect", "incompatible_versions",
     "policy_denied", "retries_exhausted", "requested", "unclaimed_tool_call"], "requested")
INVALIDATION = enum(
    "InvalidationReason", "Why a pending approval can no longer be used.",
    ["args_changed", "superseded", "run_cancelled", "run_ended", "policy_changed"], "superseded")
OUTCOME = enum(
    "ReconcileOutcome", "What querying the external system found.",
    ["found_completed", "found_failed", "not_found", "still_unknown"], "still_unknown")
VERIFICATION = enum(
    "VerificationStatus", "Verification track of a tool call (domain reality).",
    ["not_observed", "pending", "confirmed_success", "confirmed_failure", "inconclusive"],
    "inconclusive")
TIMER_KIND = enum(
    "TimerKind", "What a decider timer guards.",
    ["approval_expiry", "reconciliation_deadline", "wall_budget", "claim_deadline", "memory_expiry"],
    "wall_budget")
DIMENSION = enum(
    "BudgetDimension", "One budget dimension.",
    ["steps", "tool_calls", "tokens", "wall_time", "cost"], "cost")


def event_envelope(type_name: str, version: int) -> list[dict[str, Any]]:
    """The event envelope fields, in wire order (payload follows last)."""
    return [
        f("eventId", STRING, "Unique id, deterministic from the input position or commandId."),
        f("eventType", STRING, "Dotted lower-case event type.", default=type_name),
        f("runId", STRING),
        opt("turnId", STRING),
        f("producer", STRING, "Component that appended the event."),
        opt("reasoningObjectId", STRING),
        opt("capabilityId", STRING),
        f("correlationId", STRING),
        opt("causationId", STRING, "Id of the command or event that caused this one."),
        f("schemaVersion", INT, default=version),
        f("occurredAt", TIMESTAMP),
    ]


def command_envelope(type_name: str, version: int) -> list[dict[str, Any]]:
    """The command envelope fields, in wire order (payload follows last)."""
    return [
        f("commandId", STRING, "Unique id; the decider deduplicates on it."),
        f("commandType", STRING, "Dotted lower-case command type.", default=type_name),
        f("runId", STRING),
        opt("expectedVersion", LONG, "Run version the caller saw; null skips the check."),
        f("actor", ACTOR),
        f("issuedAt", TIMESTAMP),
        f("correlationId", STRING),
        opt("causationId", STRING),
        f("schemaVersion", INT, default=version),
    ]


def all_types() -> tuple[TypeSpec, ...]:
    """Every event and command type at its current version."""
    from runfacts.schemas.spec.commands import COMMANDS
    from runfacts.schemas.spec.controls import CONTROL_COMMANDS, CONTROL_EVENTS
    from runfacts.schemas.spec.events import EVENTS

    return EVENTS + CONTROL_EVENTS + COMMANDS + CONTROL_COMMANDS
