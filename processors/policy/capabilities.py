"""Capability manifests: what a tool may do, who may ask, how its calls are retried.

The manifest file is TOML (stdlib `tomllib`), one `[[capability]]` table per capability,
camelCase keys as on the wire:

    [[capability]]
    capabilityId = "payments.refund"
    risk = "high"
    requiredRole = "support_agent"
    needsApproval = true
    reconciliationDeadlineMs = 600000
    approvalTtlMs = 900000        # optional, default 15 minutes
    selfApproval = false          # optional, default false
    claimWithinMs = 600000        # optional, default 10 minutes: unclaimed -> needs_review
    readOnly = false              # optional: the call changes nothing, so it is simply re-run
    idempotent = false            # optional: a repeat with the same key changes nothing more
    hasLookup = true              # optional: the tool can say what became of a request
    maxConcurrency = 4            # optional: at most this many calls running at once per dispatcher
    ratePerSecond = 2.5           # optional: at most this many call starts a second per dispatcher
                                  # (fleet-wide C, R with N dispatchers: max(1, C // N), R / N; docs/dispatcher.md)
    argumentSchema = '{"type": "object", ...}'   # optional: the tool's argument JSON schema
    approvalWhen = [{ field = "amountMinor", op = ">", value = 5000 }]   # optional (needsApproval = false)
    [capability.compensation]     # optional: the call that undoes a completed one (docs/tools.md)
    capabilityId = "payments.refund_reversal"
    arguments = { refundId = "result.refundId", amountMinor = "args.amountMinor" }
    [capability.retry]
    maxAttempts = 4
    baseBackoffMs = 200
    maxBackoffMs = 5000
    deadlineMs = 30000

`argumentSchema` (JSON text; a registry exports it from the tool's pydantic argument model,
with each field's `unit` and `pii`) lets the decider validate a proposal's argument display
before anyone is asked; `approvalWhen` asks for approval when ANY of its conditions holds
(`field` `op` `value`, op one of > >= < <= == != in not_in; docs/tools.md).

`compensation` names the compensating capability and where each of its arguments comes from:
`args.<argument>` (the original call's argument, as its display shows it: not a personal one) or
`result.<field>[.<field>...]` (a field of the original call's JSON result). `parse_capabilities`
checks it against both argument schemas and names the bad field and the fix.

`parse_capabilities` is pure; `load_capabilities` only reads the file (or the packaged
default, `capabilities.toml` next to this module).
"""

from __future__ import annotations

import json
import re
import tomllib
from enum import StrEnum
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator
from pydantic.alias_generators import to_camel

from runfacts.processors.policy.retry import RetryPolicy
from runfacts.schemas.errors import ConfigError

DEFAULT_MANIFEST = "capabilities.toml"
TOOL_MARK = "__runfacts_capability__"
"""The attribute `ToolRegistry.tool` sets on a tool function: its capability id (so a client can
take the function where it takes the id, and type the call's result with its return type)."""


class Risk(StrEnum):
    """How much harm a wrong call can do."""

    LOW = "low"
    MEDIUM = "medium"
    HIGH = "high"


RuleValue = int | float | str | bool | tuple[int | float | str | bool, ...]


class ApprovalCondition(BaseModel):
    """One condition of an approval rule: `field op value` on a proposal's displayed arguments."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    field: str = Field(min_length=1)
    op: Literal[">", ">=", "<", "<=", "==", "!=", "in", "not_in"]
    value: RuleValue

    @model_validator(mode="after")
    def _fits(self) -> ApprovalCondition:
        if (self.op in ("in", "not_in")) != isinstance(self.value, tuple):
            raise ValueError(f"{self.describe()}: 'in'/'not_in' take a list, the other operators one value")
        return self

    def describe(self) -> str:
        """`amountMinor > 5000`."""
        return f"{self.field} {self.op} {json.dumps(self.value)}"


SOURCE = re.compile(r"^(args|result)((\.[A-Za-z_][A-Za-z0-9_]*)+)$")
"""A compensation argument's source: `args.<argument>` or `result.<field>[.<field>...]`."""


class Compensation(BaseModel):
    """The call that undoes a completed call of this capability, and where its arguments come
    from: compensating argument -> `args.<argument>` | `result.<field>[.<field>...]`."""

    model_config = ConfigDict(frozen=True, extra="forbid", alias_generator=to_camel, validate_by_name=True)

    capability_id: str = Field(min_length=1, pattern=r"^[A-Za-z0-9._\-]+$")
    arguments: dict[str, str]

    @field_validator("arguments")
    @classmethod
    def _sources(cls, value: dict[str, str]) -> dict[str, str]:
        for name, source in value.items():
            if SOURCE.fullmatch(source) is None:
                raise ValueError(f"arguments.{name} = {source!r} is not a source: write 'args.<argument>' "
                                 "(the original call's argument) or 'result.<field>' (a field of its result)")
        return value

    def sources(self) -> list[tuple[str, str, tuple[str, ...]]]:
        """(compensating argument, 'args' | 'result', path) for every mapped argument."""
        out = []
        for name, source in self.arguments.items():
            root, *path = source.split(".")
            out.append((name, root, tuple(path)))
        return out


@lru_cache(maxsize=256)
def parsed_schema(text: str) -> dict[str, Any]:
    """The argument schema's JSON (cached by its text)."""
    value = json.loads(text)
    if not isinstance(value, dict):
        raise ValueError("argumentSchema must be a JSON object (a JSON schema)")
    return value


class CapabilityManifest(BaseModel):
    """One capability: identity, risk, who may call it, retry and reconciliation limits."""

    model_config = ConfigDict(
        frozen=True, extra="forbid", alias_generator=to_camel, validate_by_name=True
    )

    capability_id: str = Field(min_length=1, pattern=r"^[A-Za-z0-9._\-]+$")
    risk: Risk
    required_role: str = Field(min_length=1)
    needs_approval: bool
    retry: RetryPolicy
    reconciliation_deadline_ms: int = Field(ge=1)
    approval_ttl_ms: int = Field(default=900_000, ge=1)  # an open approval expires after this
    self_approval: bool = False  # may the requester approve their own call?
    claim_within_ms: int = Field(default=600_000, ge=1)  # an authorized call no dispatcher
    # claims within this goes to needs_review (unclaimed_tool_call)
    read_only: bool = False  # changes nothing: re-run after a crash or a lost answer, never reconciled
    idempotent: bool = False  # a repeat with the call's idempotency key changes nothing more: re-run too
    has_lookup: bool = True  # False: nothing can reconcile an unknown outcome, a person decides at once
    max_concurrency: int | None = Field(default=None, ge=1)  # calls running at once, per dispatcher
    rate_per_second: float | None = Field(default=None, gt=0)  # call starts a second, per dispatcher

    argument_schema: str | None = None  # the tool's argument JSON schema (canonical JSON text)
    approval_when: tuple[ApprovalCondition, ...] = ()  # ask when any holds (needs_approval false)
    compensation: Compensation | None = None  # the call that undoes a completed one (docs/tools.md)

    @property
    def reruns_safely(self) -> bool:
        """A call whose outcome is lost is run again instead of reconciled (docs/tools.md)."""
        return self.read_only or self.idempotent

    @field_validator("argument_schema", mode="before")
    @classmethod
    def _schema_text(cls, value: Any) -> Any:
        if isinstance(value, dict):
            return json.dumps(value, separators=(",", ":"))  # property order is the display's order
        if isinstance(value, str):
            try:
                parsed_schema(value)
            except ValueError as exc:
                raise ValueError(f"not a JSON schema: {exc}") from None
        return value

    @model_validator(mode="after")
    def _rule(self) -> CapabilityManifest:
        if self.approval_when and self.needs_approval:
            raise ValueError("approvalWhen asks only when needsApproval = false (true asks for every call)")
        props = self.arguments().get("properties", {}) if self.argument_schema else None
        for condition in self.approval_when:
            if props is not None and condition.field not in props:
                raise ValueError(f"approvalWhen reads {condition.field!r}, not an argument "
                                 f"(arguments: {', '.join(props) or 'none'})")
            if props is not None and props[condition.field].get("pii"):
                raise ValueError(f"approvalWhen reads {condition.field!r}, a personal field: the decider "
                                 "cannot read it under the privacy envelope; rule on a non-personal field")
        self._check_compensation_sources(props)
        return self

    def _check_compensation_sources(self, props: dict[str, Any] | None) -> None:
        """`args.X` names a non-personal argument of this capability (the decider reads it on the
        call's display); a compensation is another capability."""
        if self.compensation is None:
            return
        if self.compensation.capability_id == self.capability_id:
            raise ValueError(f"compensation.capabilityId = {self.capability_id!r} is the capability itself: "
                             "name the capability that undoes it")
        for name, root, path in self.compensation.sources():
            if root != "args" or props is None:
                continue
            if path[0] not in props:
                raise ValueError(f"compensation.arguments.{name} reads args.{path[0]}, not an argument "
                                 f"(arguments: {', '.join(props) or 'none'})")
            if props[path[0]].get("pii"):
                raise ValueError(f"compensation.arguments.{name} reads args.{path[0]}, a personal field: the "
                                 "decider cannot read it under the privacy envelope; derive it from a "
                                 "non-personal argument or from the result")

    def arguments(self) -> dict[str, Any]:
        """The argument JSON schema ({} when the manifest declares none)."""
        return parsed_schema(self.argument_schema) if self.argument_schema else {}

    def schema_or_none(self) -> dict[str, Any] | None:
        """The argument JSON schema, or None when the manifest declares none."""
        return parsed_schema(self.argument_schema) if self.argument_schema else None

    def rule_fields(self) -> tuple[str, ...]:
        """The arguments the approval rule reads (a display never cuts them)."""
        return tuple(dict.fromkeys(c.field for c in self.approval_when))


class CapabilityCatalog(BaseModel):
    """All manifests of a deployment, by capability id."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    capabilities: dict[str, CapabilityManifest]

    def get(self, capability_id: str) -> CapabilityManifest:
        """The manifest of `capability_id`; a ConfigError naming it when there is none."""
        try:
            return self.capabilities[capability_id]
        except KeyError:
            known = ", ".join(sorted(self.capabilities)) or "none"
            why = f"no manifest (known: {known})"
            raise ConfigError("capabilityId", capability_id, why) from None


def parse_capabilities(text: str, source: str = "<manifest>") -> CapabilityCatalog:
    """Parse a TOML manifest; a ConfigError names the bad setting and value."""
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(source, None, f"not valid TOML: {exc}") from exc
    unknown = sorted(set(data) - {"capability"})
    if unknown:
        raise ConfigError(f"{source}:{unknown[0]}", data[unknown[0]], "unknown top-level key")
    tables = data.get("capability", [])
    if not isinstance(tables, list) or not tables:
        raise ConfigError(f"{source}:capability", tables, "expected one or more [[capability]]")
    manifests: dict[str, CapabilityManifest] = {}
    for index, table in enumerate(tables):
        manifest = _manifest(table, f"{source}:capability[{index}]")
        if manifest.capability_id in manifests:
            raise ConfigError(f"{source}:capability[{index}].capabilityId",
                              manifest.capability_id, "duplicate capability id")
        manifests[manifest.capability_id] = manifest
    for index, manifest in enumerate(manifests.values()):
        why = compensation_problem(manifest, manifests)
        if why is not None:
            raise ConfigError(f"{source}:capability[{index}].compensation", why[0], why[1])
    return CapabilityCatalog(capabilities=manifests)


def compensation_problem(manifest: CapabilityManifest,
                         manifests: dict[str, CapabilityManifest]) -> tuple[str, str] | None:
    """(bad value, why and the fix) when `manifest`'s compensation does not fit the catalog: the
    compensating capability exists, declares no compensation of its own, and the mapping names
    only its arguments and every one it requires."""
    comp = manifest.compensation
    if comp is None:
        return None
    other = manifests.get(comp.capability_id)
    if other is None:
        return comp.capability_id, (f"capabilityId names no capability of this manifest (known: "
                                    f"{', '.join(sorted(manifests))}): declare {comp.capability_id} too")
    if other.compensation is not None:
        return comp.capability_id, (f"{comp.capability_id} declares a compensation of its own: a "
                                    "compensation is not compensated again; remove one of the two")
    schema = other.schema_or_none()
    if schema is None:
        return None
    props = schema.get("properties", {})
    for name in comp.arguments:
        if name not in props:
            return name, (f"arguments.{name}: {comp.capability_id} has no argument {name!r} "
                          f"(its arguments: {', '.join(props) or 'none'})")
    missing = [name for name in schema.get("required", []) if name not in comp.arguments]
    if missing:
        return ", ".join(missing), (f"arguments: {comp.capability_id} requires {', '.join(missing)}: "
                                    "map each to 'args.<argument>' or 'result.<field>'")
    return None


def _manifest(table: object, where: str) -> CapabilityManifest:
    try:
        return CapabilityManifest.model_validate(table)
    except ValidationError as exc:
        first = exc.errors()[0]
        path = ".".join(str(part) for part in first["loc"])
        raise ConfigError(f"{where}.{path}", first.get("input"), first["msg"]) from exc


def load_capabilities(path: Path | None = None) -> CapabilityCatalog:
    """Load manifests from `path`, or the packaged default manifest when None."""
    if path is None:
        text = resources.files("runfacts.processors.policy").joinpath(DEFAULT_MANIFEST).read_text()
        return parse_capabilities(text, DEFAULT_MANIFEST)
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError("capabilities manifest", str(path), f"cannot read: {exc}") from exc
    return parse_capabilities(text, str(path))
