"""The dispatcher's ports: what it calls to reach an external system, where it reads arguments,
and how it seals personal fields (`SealPersonal`, runfacts.privacy implements it).

A port belongs to its consumer (LAYOUT rule 5): the dispatcher defines `ToolAdapter` and
`ArgsReader` here, and `runfacts.connectors` implements them (refund_adapter.RefundAdapter,
args_store.ArgsStore), so connectors import processors and never the other way round.

An adapter never raises for provider or network trouble: every call returns a typed
outcome. `execute` returns `ToolUnknown` whenever the request may have reached the
provider but no answer came back (timeout, reset or close after the request was
written); the dispatcher must then reconcile with `lookup(externalRequestId)`, never
call `execute` blindly. Credentials come from the adapter's settings (environment or a
secret file), never from requests or events.
"""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum
from typing import Annotated, Any, Literal, NamedTuple, Protocol, TypeVar

from pydantic import BaseModel, ConfigDict, Field, model_validator
from pydantic.alias_generators import to_camel

from runfacts.processors.policy.retry import ErrorClass, is_retryable
from runfacts.schemas.common import CommandBase
from runfacts.schemas.errors import RunfactsError

C = TypeVar("C", bound=CommandBase)
CAMEL = ConfigDict(frozen=True, extra="forbid", alias_generator=to_camel, validate_by_name=True)


class ToolRequest(BaseModel):
    """One attempt of an authorized tool call, as the dispatcher hands it to an adapter."""

    model_config = CAMEL

    tool_call_id: str = Field(min_length=1)
    capability_id: str = Field(min_length=1)
    idempotency_key: str = Field(min_length=1, max_length=255)
    external_request_id: str = Field(min_length=1, max_length=255)
    attempt: int = Field(ge=1)
    lease_epoch: int = Field(ge=0)
    arguments: dict[str, Any]


class Verification(StrEnum):
    """The verification track of a tool call (SEMANTICS §5)."""

    NOT_OBSERVED = "not_observed"
    PENDING = "pending"
    CONFIRMED_SUCCESS = "confirmed_success"
    CONFIRMED_FAILURE = "confirmed_failure"
    INCONCLUSIVE = "inconclusive"


class ToolCompleted(BaseModel):
    """The provider executed the call; `result_ref` names its result, `result_hash` pins it."""

    model_config = CAMEL

    kind: Literal["completed"] = "completed"
    result_ref: str
    result_hash: str
    provider_status: str
    verification: Verification
    replayed: bool = False  # the provider returned the first result of this key
    result: str | None = None  # canonical JSON of the typed result (size-capped by the dispatcher)


class ToolFailed(BaseModel):
    """The provider answered with an error (or nothing was sent); `retryable` follows the class."""

    model_config = CAMEL

    kind: Literal["failed"] = "failed"
    error_class: ErrorClass
    retryable: bool
    code: str
    detail: str = ""
    http_status: int | None = None
    retry_after_ms: int | None = None

    @model_validator(mode="after")
    def _consistent(self) -> ToolFailed:
        if self.error_class is ErrorClass.UNKNOWN_OUTCOME:
            raise ValueError("an unknown outcome is a ToolUnknown, not a failure")
        if self.retryable != is_retryable(self.error_class):
            raise ValueError(f"retryable={self.retryable} contradicts {self.error_class}")
        return self

    @classmethod
    def of(cls, error_class: ErrorClass, code: str, **fields: Any) -> ToolFailed:
        """A failure whose retryable flag is derived from its class."""
        return cls(error_class=error_class, retryable=is_retryable(error_class), code=code,
                   **fields)


class ToolUnknown(BaseModel):
    """The request may have reached the provider; the outcome is not known: reconcile."""

    model_config = CAMEL

    kind: Literal["unknown"] = "unknown"
    reason: str


ToolOutcome = Annotated[ToolCompleted | ToolFailed | ToolUnknown, Field(discriminator="kind")]


class FoundCompleted(BaseModel):
    """Lookup: the provider executed the request."""

    model_config = CAMEL

    kind: Literal["found_completed"] = "found_completed"
    result_ref: str
    result_hash: str
    provider_status: str
    verification: Verification
    result: str | None = None  # the same value `execute` returned, so a lost response loses nothing


class FoundFailed(BaseModel):
    """Lookup: the provider received the request and refused it."""

    model_config = CAMEL

    kind: Literal["found_failed"] = "found_failed"
    error_class: ErrorClass
    code: str
    detail: str = ""


class NotFound(BaseModel):
    """Lookup: the provider never received the request (re-dispatch with the SAME key)."""

    model_config = CAMEL

    kind: Literal["not_found"] = "not_found"


class LookupUnknown(BaseModel):
    """Lookup: no usable answer; ask again later (`retryable`) or hand to a person."""

    model_config = CAMEL

    kind: Literal["unknown"] = "unknown"
    reason: str
    retryable: bool


LookupOutcome = Annotated[
    FoundCompleted | FoundFailed | NotFound | LookupUnknown, Field(discriminator="kind")
]


class ToolAdapter(Protocol):
    """What the dispatcher needs from a tool; implementations never raise for I/O trouble."""

    def execute(self, request: ToolRequest) -> ToolOutcome:
        """Send one attempt with the request's idempotency key and lease epoch."""
        ...

    def lookup(self, external_request_id: str) -> LookupOutcome:
        """Ask the provider what became of a request (reconciliation)."""
        ...

    def cancel(self, external_request_id: str) -> bool:
        """Cancel the request's effect where the provider allows it; True when it is canceled."""
        ...


class ArgsReader(Protocol):
    """Where the dispatcher reads a call's arguments (connectors/args_store.py implements it)."""

    def load_verified(self, ref: str, expected_hash: str) -> dict[str, Any]: ...


class SealPersonal(Protocol):
    """How the dispatcher seals the personal fields of a command before it is encoded and signed
    (`runfacts.privacy.store.Protector` implements it): identities become pseudonyms, free text
    (a tool result, an error's message, `lastError`) is sealed under a data key of `subject`, the
    run's data subject (its `userId`, a pseudonym `rfp1.<ref>` when the run was created sealed).
    None (no privacy keys configured): the commands go out as they are."""

    def __call__(self, command: C, subject: str | None = None) -> C: ...


class Pause(NamedTuple):
    """A capability paused for the fleet: the `tool.paused` fact (its eventId), who, why, when."""

    pause_id: str
    paused_by: str
    reason: str
    paused_at: datetime


class PauseBoard(Protocol):
    """Which capabilities are paused now (`runfacts.ops.toolcontrol.ToolControlBoard` implements it
    over the compacted `<prefix>.tools.control` topic, read whole). None: not paused."""

    def paused(self, capability_id: str) -> Pause | None: ...


class ArgsMissing(RunfactsError):
    """No arguments are stored under the reference."""

    def __init__(self, ref: str) -> None:
        self.ref = ref
        super().__init__(f"no arguments stored under argsRef {ref!r}")


class ArgsTampered(RunfactsError):
    """The stored arguments do not hash to the hash the events carry."""

    def __init__(self, ref: str, expected: str, actual: str) -> None:
        self.ref = ref
        super().__init__(f"arguments under argsRef {ref!r} hash to {actual[:16]}…, "
                         f"the tool call expects {expected[:16]}…")
