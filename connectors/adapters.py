"""The tool adapter seam: what the dispatcher calls to reach an external system.

An adapter never raises for provider or network trouble: every call returns a typed
outcome. `execute` returns `ToolUnknown` whenever the request may have reached the
provider but no answer came back (timeout, reset or close after the request was
written); the dispatcher must then reconcile with `lookup(externalRequestId)`, never
call `execute` blindly. Credentials come from the adapter's settings (environment or a
secret file), never from requests or events.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated, Any, Literal, Protocol

from pydantic import BaseModel, ConfigDict, Field, model_validator
from pydantic.alias_generators import to_camel

from runfacts.processors.retry import ErrorClass, is_retryable

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
