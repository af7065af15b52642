"""Access policy as data: trusted auth sources, who may issue which command, who may approve.

The policy file is TOML (`policy.toml` next to this module is the packaged default):

    policyVersion = "2026-12-06.2"
    [sources.dashboard]                 # a trusted auth source ...
    roles = ["user", "operator"]        # ... and the only roles it may vouch for
    tenantScoped = true                 # (default) its actors act within their tenant
    [sources.dispatcher]
    roles = ["dispatcher"]
    tenantScoped = false                # a service acting for every tenant
    crossTenantRoles = ["operator"]     # top level: roles that act on any tenant's runs
    [commands]
    "run.stop" = { roles = ["user", "operator"] }
    "run.resume" = { roleFromCapability = true }   # the capability manifest decides

Tenancy: an actor of a tenant-scoped source acts only on runs of its own tenant (a tenantless
actor only on tenantless runs), and creates runs only in its own tenant, unless it holds a
cross-tenant role (`check_tenant`). Sources default to tenant-scoped: a new source fails
closed until it is marked as a service.

Invariants checked at load: every command type of the contract has exactly one rule, and
every role a rule or a capability manifest names can be vouched for by some source (so a
typo cannot silently lock everyone out or in).

A `Policy` holds the rules and the capability catalog (`runfacts.processors.policy.capabilities`,
which owns risk, requiredRole, needsApproval, approvalTtlMs, selfApproval). The checks are
pure and total: they return None (allowed) or a snake_case reason code for the decider's
`command.rejected` event. File reading lives only in `load_policy`.
"""

from __future__ import annotations

import hashlib
import tomllib
from collections.abc import Collection
from importlib import resources
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from runfacts.processors.policy.capabilities import CapabilityCatalog, CapabilityManifest, load_capabilities
from runfacts.schemas.commands import COMMAND_CLASSES
from runfacts.schemas.common import Actor, CommandEnvelope
from runfacts.schemas.errors import ConfigError

DEFAULT_POLICY = "policy.toml"
VERSION_PATTERN = r"^\d{4}-\d{2}-\d{2}\.\d+$"

CommandDenial = Literal["missing_actor", "untrusted_source", "forbidden_role", "no_policy_rule"]
TenantDenial = Literal["tenant_mismatch"]
ApproverDenial = Literal["missing_actor", "untrusted_source", "forbidden_role", "self_approval_forbidden"]
SERVICE_SOURCES: frozenset[str] = frozenset({"agent-harness", "dispatcher", "decider-timer", "decider-xrun"})
"""The runtime's own auth sources (the agent harness, the dispatcher, the decider's timer): their
actors are service identities, never requesters. Every other source's actor counts as a person."""


class SourceRule(BaseModel):
    """A trusted auth source, the roles it may vouch for, and whether its actors are tenant-bound."""

    model_config = ConfigDict(frozen=True, extra="forbid", validate_by_name=True)

    roles: frozenset[str] = Field(min_length=1)
    tenant_scoped: bool = Field(default=True, alias="tenantScoped")
    """Its actors act within their own tenant; false for services that act for every tenant."""


class CommandRule(BaseModel):
    """Who may issue one command type: listed roles, or the capability's requiredRole."""

    model_config = ConfigDict(frozen=True, extra="forbid", validate_by_name=True)

    roles: frozenset[str] = frozenset()
    role_from_capability: bool = Field(default=False, alias="roleFromCapability")

    @model_validator(mode="after")
    def _one_way(self) -> CommandRule:
        if self.role_from_capability == bool(self.roles):
            raise ValueError("give either a non-empty `roles` or `roleFromCapability = true`")
        return self


class Policy(BaseModel):
    """A versioned access policy plus the capability catalog it applies to. Aliases are the
    file's keys, so a validation error names the setting as the file spells it."""

    model_config = ConfigDict(frozen=True, extra="forbid", validate_by_name=True)

    version: str = Field(pattern=VERSION_PATTERN, alias="policyVersion")
    digest: str  # sha256 of the policy text: catches an edit without a version bump
    sources: dict[str, SourceRule]
    commands: dict[str, CommandRule]
    capabilities: CapabilityCatalog
    cross_tenant_roles: frozenset[str] = Field(default=frozenset(), alias="crossTenantRoles")
    """Roles whose holders act on runs of any tenant (e.g. platform operators)."""


def effective_roles(policy: Policy, actor: Actor) -> frozenset[str]:
    """The actor's roles that its auth source may vouch for (empty for an untrusted source)."""
    source = policy.sources.get(actor.authSource)
    if source is None:
        return frozenset()
    return frozenset(actor.roles) & source.roles


def _actor_denial(policy: Policy, actor: Actor | None) -> Literal["missing_actor", "untrusted_source"] | None:
    if actor is None or not actor.subjectId.strip() or not actor.authSource.strip():
        return "missing_actor"
    if actor.authSource not in policy.sources:
        return "untrusted_source"
    return None


def check_command(policy: Policy, command: CommandEnvelope) -> CommandDenial | None:
    """None when the command's actor may issue it; otherwise why not.

    For `roleFromCapability` types (run.resume) only the actor and its source are checked
    here; the decider then calls `check_approver` with the approval's capability manifest.
    """
    denial = _actor_denial(policy, command.actor)
    if denial is not None:
        return denial
    rule = policy.commands.get(command.commandType)
    if rule is None:
        return "no_policy_rule"
    if rule.role_from_capability:
        return None
    if not effective_roles(policy, command.actor) & rule.roles:
        return "forbidden_role"
    return None


def required_roles(policy: Policy, command_type: str) -> tuple[str, ...]:
    """The roles the policy asks of `command_type` (sorted; empty: no rule, or the capability's role)."""
    rule = policy.commands.get(command_type)
    return () if rule is None else tuple(sorted(rule.roles))


def check_tenant(policy: Policy, command: CommandEnvelope, run_tenant: str | None) -> TenantDenial | None:
    """None when the command's actor may act on a run of `run_tenant` (for run.create: the
    tenant the run is created in); otherwise why not. Call after `check_command`."""
    actor = command.actor
    if actor.tenant == run_tenant or not tenant_bound(policy, actor):
        return None
    return "tenant_mismatch"


def tenant_bound(policy: Policy, actor: Actor) -> bool:
    """True when the actor acts only within its own tenant: its source is tenant-scoped and it
    holds no cross-tenant role that source may vouch for."""
    source = policy.sources.get(actor.authSource)
    if source is None or not source.tenant_scoped:
        return False
    return not effective_roles(policy, actor) & policy.cross_tenant_roles


def is_service_identity(actor: Actor) -> bool:
    """True for an actor of one of the runtime's own sources (`SERVICE_SOURCES`)."""
    return actor.authSource in SERVICE_SOURCES


def requesters(user_id: str, *actors: Actor | None) -> tuple[str, ...]:
    """Every subject a request stands for (docs/security.md "Who counts as a requester"): the
    run's user, then each of `actors` (the run's creator, the proposer) that is a person, once
    each, in that order. A service identity never counts. Pure, policy-free: the fold uses it."""
    found = [user_id, *(a.subjectId for a in actors if a is not None and not is_service_identity(a))]
    return tuple(dict.fromkeys(s for s in found if s))


def check_approver(
    policy: Policy, manifest: CapabilityManifest, approver: Actor, requested_by: str | Collection[str]
) -> ApproverDenial | None:
    """None when `approver` may decide an approval of `manifest`'s capability; otherwise why not.

    `requested_by`: the subject id(s) the request stands for (`requesters`: the run's user, its
    creator and the proposer when they are persons); without self-approval none of them may
    decide it.
    """
    denial = _actor_denial(policy, approver)
    if denial is not None:
        return denial
    if manifest.required_role not in effective_roles(policy, approver):
        return "forbidden_role"
    requesters = {requested_by} if isinstance(requested_by, str) else set(requested_by)
    if not manifest.self_approval and approver.subjectId in requesters:
        return "self_approval_forbidden"
    return None


def allowed_command_types(policy: Policy, actor: Actor) -> frozenset[str]:
    """Command types the actor may issue by role (for role-trimmed views: canStop, canRetry)."""
    if _actor_denial(policy, actor) is not None:
        return frozenset()
    roles = effective_roles(policy, actor)
    return frozenset(t for t, rule in policy.commands.items() if rule.roles & roles)


def parse_policy(text: str, catalog: CapabilityCatalog, source: str = "<policy>") -> Policy:
    """Parse and validate a TOML policy; a ConfigError names the bad setting and value."""
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(source, None, f"not valid TOML: {exc}") from exc
    unknown = sorted(set(data) - {"policyVersion", "sources", "commands", "crossTenantRoles"})
    if unknown:
        raise ConfigError(f"{source}:{unknown[0]}", data[unknown[0]], "unknown top-level key")
    raw = {"sources": {}, "commands": {}, **data,  # a missing table: every rule is reported missing
           "digest": hashlib.sha256(text.encode()).hexdigest(), "capabilities": catalog}
    try:
        policy = Policy.model_validate(raw)
    except ValidationError as exc:
        first = exc.errors()[0]
        path = ".".join(str(part) for part in first["loc"])
        raise ConfigError(f"{source}:{path}", first.get("input"), first["msg"]) from exc
    _check_complete(policy, source)
    return policy


def _check_complete(policy: Policy, source: str) -> None:
    missing = sorted(set(COMMAND_CLASSES) - set(policy.commands))
    if missing:
        raise ConfigError(f"{source}:commands", missing[0], "command type of the contract has no rule")
    extra = sorted(set(policy.commands) - set(COMMAND_CLASSES))
    if extra:
        raise ConfigError(f"{source}:commands", extra[0], "not a command type of the contract")
    vouchable = frozenset().union(*(s.roles for s in policy.sources.values()))
    for command_type, rule in sorted(policy.commands.items()):
        for role in sorted(rule.roles - vouchable):
            raise ConfigError(f"{source}:commands.{command_type}", role, "no trusted source vouches for this role")
    for role in sorted(policy.cross_tenant_roles - vouchable):
        raise ConfigError(f"{source}:crossTenantRoles", role, "no trusted source vouches for this role")
    for cap_id, manifest in sorted(policy.capabilities.capabilities.items()):
        if manifest.required_role not in vouchable:
            human = sorted(frozenset().union(*(s.roles for s in policy.sources.values() if s.tenant_scoped)))
            why = (f"capability's requiredRole: no trusted source vouches for it; declare one a person can hold"
                   f" ({', '.join(human)}: required_role= on the tool) or add it to a source's roles"
                   f" in your policy file (`runfacts worker decider --policy FILE`; docs/tools.md)")
            raise ConfigError(f"{source}:capability {cap_id}", manifest.required_role, why)


def load_policy(path: Path | None = None, catalog: CapabilityCatalog | None = None) -> Policy:
    """Load a policy file (or the packaged default) with a catalog (or the default manifests)."""
    catalog = catalog if catalog is not None else load_capabilities()
    if path is None:
        text = resources.files("runfacts.processors.policy").joinpath(DEFAULT_POLICY).read_text()
        return parse_policy(text, catalog, DEFAULT_POLICY)
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError("policy file", str(path), f"cannot read: {exc}") from exc
    return parse_policy(text, catalog, str(path))
