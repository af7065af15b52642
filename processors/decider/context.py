"""What every decide handler shares: the context, drafts, rejections.

Handlers (`decide_run`, `decide_tools`) return `Draft`s or raise `Rejected`; the entry
point `runfacts.processors.decider.core.decide` stamps drafts into events.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from functools import cache
from types import UnionType
from typing import Any, Literal, NamedTuple, Union, get_args, get_origin

from pydantic import BaseModel, StringConstraints

from runfacts.processors.decider.state import RunState
from runfacts.processors.policy.capabilities import CapabilityCatalog, CapabilityManifest
from runfacts.schemas import commands as cmd
from runfacts.schemas.base import Record
from runfacts.schemas.common import Actor, CommandBase, EventBase, RunVersions
from runfacts.schemas.construct import trusted
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


def default_check_approver(manifest: CapabilityManifest, approver: Actor, requested_by: str) -> str | None:
    """Approver holds the capability's required role, and is not the requester unless allowed."""
    if manifest.required_role not in approver.roles:
        return "forbidden_role"
    if approver.subjectId == requested_by and not manifest.self_approval:
        return "self_approval_forbidden"
    return None


def default_check_tenant(command: CommandBase, run_tenant: str | None) -> str | None:
    """Without a policy there is no tenancy: every actor may act on every run."""
    return None


TokenCheck = Callable[["cmd.ResumeRun", Any], "str | None"]
ReviewCheck = Callable[["cmd.ReviewMemory", Any], "str | None"]


@dataclass(frozen=True)
class DecideContext:
    """What decide needs besides command and state: policy and the runtime's versions."""

    capabilities: CapabilityCatalog
    current_versions: RunVersions
    producer: str = PRODUCER
    loop_threshold: int = 3
    policy_version: str = "default"
    check_command: Callable[[CommandBase], str | None] = default_check_command
    check_approver: Callable[[CapabilityManifest, Actor, str], str | None] = default_check_approver
    check_tenant: Callable[[CommandBase, str | None], str | None] = default_check_tenant
    """(command, the run's tenant or for run.create the new run's) -> None or a reason code."""
    verify_token: TokenCheck | None = None  # None: approvals need no signed token
    verify_review_token: ReviewCheck | None = None  # None: memory reviews need no signed token


class Draft(NamedTuple):
    """An event before stamping: its class, payload and the envelope ids it sets."""

    event: type[EventBase]
    payload: Record
    turnId: str | None = None
    capabilityId: str | None = None
    reasoningObjectId: str | None = None


def draft(event: type[EventBase], *, turnId: str | None = None, capabilityId: str | None = None,
          reasoningObjectId: str | None = None, **payload: Any) -> Draft:
    """A draft of `event` with a payload built from keyword arguments (`payload_of`)."""
    return Draft(event, payload_of(event, payload), turnId, capabilityId, reasoningObjectId)


def payload_of(event: type[EventBase], values: dict[str, Any]) -> Record:
    """`event`'s payload holding `values`. The decider builds every value from a validated
    command, its state or its policy, so a payload whose values already have their fields'
    types is assembled as is (defaults filled in, lists made tuples), without a second
    validation; anything else (a missing or unknown field, a value of another type) goes through
    pydantic, which converts or names what is wrong. tests/unit/test_decider_payloads.py holds
    every payload the decider drafts equal to pydantic's."""
    return _payload_builder(event)(values)


@cache
def _payload_builder(event: type[EventBase]) -> Callable[[dict[str, Any]], Record]:
    cls = payload_class(event)
    fields = cls.model_fields
    checks = {name: _checked(info.annotation, info.metadata) for name, info in fields.items()}
    if any(check is None for check in checks.values()):
        return lambda values: cls(**values)
    defaults = {name: info.default for name, info in fields.items() if not info.is_required()}
    names = frozenset(fields)

    def build(values: dict[str, Any]) -> Record:
        if not names.issuperset(values) or not names.difference(defaults).issubset(values):
            return cls(**values)
        out = {}
        for name in fields:
            value = values[name] if name in values else defaults[name]
            if type(value) is list:
                value = tuple(value)
            if not checks[name](value):  # type: ignore[misc]
                return cls(**values)
            out[name] = value
        return trusted(cls, out)  # type: ignore[no-any-return]

    return build


_PLAIN: dict[Any, type] = {str: str, int: int, bool: bool, datetime: datetime}


def _checked(annotation: Any, metadata: list[Any]) -> Callable[[Any], bool] | None:
    """`_accepts`, plus a field's string patterns (any other constraint or validator: None)."""
    check = _accepts(annotation)
    if not metadata or check is None:
        return check
    if not all(isinstance(m, StringConstraints) and m.pattern and m.max_length is None and m.min_length is None
               and not (m.strip_whitespace or m.to_upper or m.to_lower) for m in metadata):
        return None
    patterns = [re.compile(str(m.pattern)).match for m in metadata]
    return lambda v: check(v) and (v is None or all(match(v) for match in patterns))


def _accepts(annotation: Any) -> Callable[[Any], bool] | None:
    """A check that a value already has `annotation`'s type (None: no cheap check, validate)."""
    origin, args = get_origin(annotation), get_args(annotation)
    if annotation in _PLAIN:
        kind = _PLAIN[annotation]
        return lambda v: type(v) is kind
    if origin is Literal:
        allowed = frozenset(args)
        return lambda v: type(v) is str and v in allowed
    if origin in (Union, UnionType):
        options = [_accepts(a) for a in args if a is not type(None)]
        if any(o is None for o in options):
            return None
        return lambda v: v is None or any(o(v) for o in options)  # type: ignore[misc]
    if origin is tuple and len(args) == 2 and args[1] is Ellipsis:
        item = _accepts(args[0])
        if item is None:
            return None
        return lambda v: type(v) is tuple and all(item(x) for x in v)
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return lambda v: type(v) is annotation
    return None


Handler = Callable[[Any, RunState, DecideContext], list[Draft]]




def state_hash(state: RunState | None) -> str:
    """sha256 of the state's canonical JSON (for checkpoints)."""
    body = b"" if state is None else state.model_dump_json().encode()
    return hashlib.sha256(body).hexdigest()
