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
    [capability.retry]
    maxAttempts = 4
    baseBackoffMs = 200
    maxBackoffMs = 5000
    deadlineMs = 30000

`parse_capabilities` is pure; `load_capabilities` only reads the file (or the packaged
default, `capabilities.toml` next to this module).
"""

from __future__ import annotations

import tomllib
from enum import StrEnum
from importlib import resources
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, ValidationError
from pydantic.alias_generators import to_camel

from runfacts.processors.policy.retry import RetryPolicy
from runfacts.schemas.errors import ConfigError

DEFAULT_MANIFEST = "capabilities.toml"


class Risk(StrEnum):
    """How much harm a wrong call can do."""

    LOW = "low"
    MEDIUM = "medium"
    HIGH = "high"


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

    @property
    def reruns_safely(self) -> bool:
        """A call whose outcome is lost is run again instead of reconciled (docs/tools.md)."""
        return self.read_only or self.idempotent


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
    return CapabilityCatalog(capabilities=manifests)


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
