"""What every decide handler shares: the context, drafts, rejections.

Handlers (`decide_run`, `decide_tools`) return `Draft`s or raise `Rejected`; the entry
point `runfacts.processors.decider.core.decide` stamps drafts into events.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Collection
from dataclasses import dataclass
from typing import Any, NamedTuple

from runfacts.processors.decider.state import RunState
from runfacts.processors.policy.capabilities import CapabilityCatalog, CapabilityManifest
from runfacts.schemas import commands as cmd
from runfacts.schemas.base import Record
from runfacts.schemas.common import Actor, CommandBase, EventBase, RunVersions
from runfacts.schemas.errors import DomainError
from runfacts.schemas.models import payload_class

PRODUCER = "run-decider"
class Rejected(DomainError):
    """A command the run's state or the policy does not allow."""

    def __init__(self, command: CommandBase, reason: str, detail: str = "") -> None:
        super().__init__(command.runId, command.commandId, reason, detail)


def default_check_command(command: CommandBase) -> str | None:
    """The minimum policy: a command names who sent it and how they were authenticated."""
    actor = command.actor
    if not actor.subjectId or not actor.authSource:
        return "missing_actor"
    return None


def default_check_approver(manifest: CapabilityManifest, approver: Actor, requested_by: Collection[str]) -> str | None:
    """Approver holds the capability's required role, and is none of the requesters unless allowed."""
    if manifest.required_role not in approver.roles:
        return "forbidden_role"
    if approver.subjectId in requested_by and not manifest.self_approval:
        return "self_approval_forbidden"
    return None


def default_check_tenant(command: CommandBase, run_tenant: str | None) -> str | None:
    """Without a policy there is no tenancy: every actor may act on every run."""
    return None


TokenCheck = Callable[["cmd.ResumeRun", Any], "str | None"]
ReviewCheck = Callable[["cmd.ReviewMemory", Any], "str | None"]


# the versions a run pins when the deployment publishes none (`runfacts worker decider` without
# --versions); the client falls back to them before the decider's published versions are read
DEFAULT_VERSIONS = RunVersions(stateSchema="1", modelRoute="default", toolManifest="default",
                               policy="default")


@dataclass(frozen=True)
class DecideContext:
    """What decide needs besides command and state: policy and the runtime's versions."""

    capabilities: CapabilityCatalog
    current_versions: RunVersions
    producer: str = PRODUCER
    loop_threshold: int = 3
    policy_version: str = "default"
    check_command: Callable[[CommandBase], str | None] = default_check_command
    check_approver: Callable[[CapabilityManifest, Actor, Collection[str]], str | None] = default_check_approver
    """(manifest, approver, the approval's requesters) -> None or a reason code."""
    check_tenant: Callable[[CommandBase, str | None], str | None] = default_check_tenant
    """(command, the run's tenant or for run.create the new run's) -> None or a reason code."""
    required_roles: Callable[[str], tuple[str, ...]] = lambda command_type: ()
    """The roles the policy asks of a command type: a `forbidden_role` rejection names them."""
    verify_token: TokenCheck | None = None  # None: approvals need no signed token
    verify_review_token: ReviewCheck | None = None  # None: memory reviews need no signed token
    drained: frozenset[tuple[str, str]] = frozenset()
    """(dimension, version) pairs this partition drained (`version.drained`): no run starts on them.
    The shell sets it from the partition's store for `run.create` (docs/decider.md "Draining")."""
    dispatcher_incarnation: int | None = None
    """The incarnation of the dispatcher that last claimed on this command's partition (the
    shell's memory, ADR 0011): an authorization then carries that dispatcher's lease and
    dispatches at once. None: the dispatcher claims."""


class Draft(NamedTuple):
    """An event before stamping: its class, payload and the envelope ids it sets."""

    event: type[EventBase]
    payload: Record
    turnId: str | None = None
    capabilityId: str | None = None
    reasoningObjectId: str | None = None


def draft(event: type[EventBase], *, turnId: str | None = None, capabilityId: str | None = None,
          reasoningObjectId: str | None = None, **payload: Any) -> Draft:
    """A draft of `event` with a payload built (and validated) from keyword arguments."""
    return Draft(event, payload_class(event)(**payload), turnId, capabilityId, reasoningObjectId)


Handler = Callable[[Any, RunState, DecideContext], list[Draft]]




def state_hash(state: RunState | None) -> str:
    """sha256 of the state's canonical JSON (for checkpoints)."""
    body = b"" if state is None else state.model_dump_json().encode()
    return hashlib.sha256(body).hexdigest()
