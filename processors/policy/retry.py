"""Pure retry policy for tool calls: error classes, backoff decisions, idempotency keys.

Invariant: an outcome that may have reached the provider (a timeout or a dropped
connection after a side-effecting request was written) is `UNKNOWN_OUTCOME`. It is never
retried by `next_retry`: it leads to `result_unknown` and reconciliation by
externalRequestId. Read-only calls (lookups) may retry such failures, they change nothing.

No clock, randomness or I/O here: `now_ms` and the jitter seed are arguments, so the
same inputs always yield the same decision.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass
from enum import StrEnum
from functools import lru_cache
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, model_validator
from pydantic.alias_generators import to_camel


class ErrorClass(StrEnum):
    """What kind of failure a tool call met; retryability is a property of the class."""

    TRANSIENT = "transient"  # connect refused/timeout before send, 408, 500, 502-504
    RATE_LIMITED = "rate_limited"  # 429, honour Retry-After
    VALIDATION = "validation"  # 400, 422: the request itself is wrong
    PERMISSION = "permission"  # 401, 403
    CONFLICT = "conflict"  # 409: ambiguity, idempotency-key reuse with other input
    FENCED = "fenced"  # 409 stale_epoch: a newer lease holder owns the call
    REFUSED = "refused"  # 402 and other 4xx: a business refusal
    PROVIDER = "provider"  # other 5xx (501, 505, ...): the provider cannot do it
    UNKNOWN_OUTCOME = "unknown_outcome"  # may have happened: reconcile, never blind retry
    TOOL_EXCEPTION = "tool_exception"  # a registered tool raised an unexpected exception (a bug)


RETRYABLE: frozenset[ErrorClass] = frozenset({ErrorClass.TRANSIENT, ErrorClass.RATE_LIMITED})


def is_retryable(error: ErrorClass) -> bool:
    """True for the classes a retry with the same idempotency key may fix."""
    return error in RETRYABLE


class Phase(StrEnum):
    """How far a call got before it failed, as the shell observed it."""

    BEFORE_SEND = "before_send"  # nothing of the request can have reached the provider
    AFTER_SEND = "after_send"  # the request was (or may have been) written


@dataclass(frozen=True)
class Observation:
    """A failed call as seen by the shell: an HTTP status, or a transport failure."""

    phase: Phase
    status: int | None = None  # HTTP status when a response arrived
    code: str = ""  # the provider's error code, or the transport error's name


_STATUS_CLASSES: dict[int, ErrorClass] = {
    400: ErrorClass.VALIDATION,
    422: ErrorClass.VALIDATION,
    401: ErrorClass.PERMISSION,
    403: ErrorClass.PERMISSION,
    409: ErrorClass.CONFLICT,
    408: ErrorClass.TRANSIENT,
    429: ErrorClass.RATE_LIMITED,
    500: ErrorClass.TRANSIENT,
    502: ErrorClass.TRANSIENT,
    503: ErrorClass.TRANSIENT,
    504: ErrorClass.TRANSIENT,
}


def classify(observed: Observation, *, side_effect: bool) -> ErrorClass:
    """The error class of a failed call; `side_effect` is False for read-only calls."""
    if observed.status is None:
        return _classify_transport(observed.phase, side_effect)
    return classify_status(observed.status, observed.code)


def _classify_transport(phase: Phase, side_effect: bool) -> ErrorClass:
    if phase is Phase.BEFORE_SEND or not side_effect:
        return ErrorClass.TRANSIENT
    return ErrorClass.UNKNOWN_OUTCOME


def classify_status(status: int, code: str = "") -> ErrorClass:
    """The error class of an HTTP error response (status >= 400)."""
    if not 400 <= status <= 599:
        raise ValueError(f"status {status} is not an HTTP error status")
    if status == 409 and code == "stale_epoch":
        return ErrorClass.FENCED
    if status in _STATUS_CLASSES:
        return _STATUS_CLASSES[status]
    return ErrorClass.REFUSED if status < 500 else ErrorClass.PROVIDER


class RetryPolicy(BaseModel):
    """How often and how long a capability's calls are retried."""

    model_config = ConfigDict(
        frozen=True, extra="forbid", alias_generator=to_camel, validate_by_name=True
    )

    max_attempts: int = Field(ge=1, le=100)
    base_backoff_ms: int = Field(ge=1)
    max_backoff_ms: int = Field(ge=1)
    deadline_ms: int = Field(ge=1)

    @model_validator(mode="after")
    def _backoff_bounds(self) -> RetryPolicy:
        if self.max_backoff_ms < self.base_backoff_ms:
            raise ValueError(
                f"maxBackoffMs={self.max_backoff_ms} is below baseBackoffMs={self.base_backoff_ms}"
            )
        return self


class GiveUpReason(StrEnum):
    """Why no further attempt is made."""

    NOT_RETRYABLE = "not_retryable"  # the error class forbids a retry: fail the call
    RECONCILE = "reconcile"  # outcome unknown: result_unknown, then look it up
    MAX_ATTEMPTS = "max_attempts"
    DEADLINE = "deadline"


@dataclass(frozen=True)
class Retry:
    """Try again at `retry_at_ms` as attempt `next_attempt` (same idempotency key)."""

    retry_at_ms: int
    delay_ms: int
    next_attempt: int


@dataclass(frozen=True)
class GiveUp:
    """Stop retrying; `detail` names the error class and the limit that was hit."""

    reason: GiveUpReason
    detail: str


RetryDecision = Retry | GiveUp


def next_retry(
    policy: RetryPolicy,
    attempt: int,
    now_ms: int,
    first_attempt_ms: int,
    error: ErrorClass,
    *,
    retry_after_ms: int | None = None,
    jitter_seed: str = "",
) -> RetryDecision:
    """Decide what follows failed attempt number `attempt` (1-based) that met `error`."""
    _check_clock(attempt, now_ms, first_attempt_ms)
    if error is ErrorClass.UNKNOWN_OUTCOME:
        return GiveUp(GiveUpReason.RECONCILE, f"{error}: reconcile by externalRequestId")
    if not is_retryable(error):
        return GiveUp(GiveUpReason.NOT_RETRYABLE, f"{error} is not retryable")
    if attempt >= policy.max_attempts:
        return GiveUp(GiveUpReason.MAX_ATTEMPTS, f"{error} after {attempt} attempts")
    delay = backoff_ms(policy, attempt, jitter_seed)
    if retry_after_ms is not None:
        delay = max(delay, retry_after_ms)
    retry_at = now_ms + delay
    deadline = first_attempt_ms + policy.deadline_ms
    if retry_at > deadline:
        return GiveUp(GiveUpReason.DEADLINE, f"{error}: retry at {retry_at} > deadline {deadline}")
    return Retry(retry_at_ms=retry_at, delay_ms=delay, next_attempt=attempt + 1)


def _check_clock(attempt: int, now_ms: int, first_attempt_ms: int) -> None:
    if attempt < 1:
        raise ValueError(f"attempt={attempt}: attempts count from 1")
    if now_ms < first_attempt_ms:
        raise ValueError(f"now_ms={now_ms} is before first_attempt_ms={first_attempt_ms}")


def backoff_ms(policy: RetryPolicy, attempt: int, jitter_seed: str) -> int:
    """Exponential backoff with deterministic 'equal jitter': in [cap/2, cap]."""
    cap = min(policy.max_backoff_ms, policy.base_backoff_ms * 2 ** min(attempt - 1, 40))
    half = cap // 2
    return half + round((cap - half) * jitter_fraction(jitter_seed, attempt))


def jitter_fraction(seed: str, attempt: int) -> float:
    """A fraction in [0, 1) that depends only on (seed, attempt)."""
    digest = hashlib.sha256(f"{seed}:{attempt}".encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2**64


def canonical_json(value: Any) -> bytes:
    """Canonical JSON bytes: sorted keys, no whitespace, UTF-8, no NaN/Infinity."""
    try:
        text = json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False,
                          allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"value is not canonical-JSON serialisable: {exc}") from exc
    return text.encode("utf-8")


def args_hash(arguments: dict[str, Any]) -> str:
    """Hex sha256 of the arguments' canonical JSON; equal arguments give equal hashes."""
    if not isinstance(arguments, dict):
        raise ValueError(f"arguments must be a dict, got {type(arguments).__name__}")
    return hashlib.sha256(canonical_json(arguments)).hexdigest()


_KEY_PART = re.compile(r"^[A-Za-z0-9._\-]{1,100}$")
KEY_HASH_CHARS = 24


@lru_cache(maxsize=4096)
def idempotency_key(run_id: str, action: str, target: str, arguments_hash: str) -> str:
    """`<action>:<target>:<hash prefix>` over run, action, target and arguments hash.

    The same run, action, target and arguments always give the same key; any change
    (other arguments, another run) gives a new key. Cached: the decider asks at proposal
    and again when it folds the proposal.
    """
    for name, part in (("action", action), ("target", target)):
        if not _KEY_PART.match(part):
            raise ValueError(f"{name}={part!r}: use 1-100 of [A-Za-z0-9._-]")
    if not run_id:
        raise ValueError("run_id is empty")
    if not re.fullmatch(r"[0-9a-f]{64}", arguments_hash):
        raise ValueError(f"arguments_hash={arguments_hash!r}: expected 64 hex digits (sha256)")
    digest = hashlib.sha256(canonical_json([run_id, action, target, arguments_hash])).hexdigest()
    return f"{action}:{target}:{digest[:KEY_HASH_CHARS]}"


_BUSINESS_KEY = re.compile(r"^[A-Za-z0-9._:#\-]{1,128}$")


def business_idempotency_key(tenant: str | None, business_key: str) -> str:
    """The key sent to the tool for a proposal with a business key: `bk:<tenant>:<key>`, the
    same in every run of the tenant, so the provider dedupes across runs (docs/tools.md)."""
    if not _BUSINESS_KEY.match(business_key):
        raise ValueError(f"businessKey={business_key!r}: use 1-128 of [A-Za-z0-9._:#-]")
    return f"bk:{tenant or '-'}:{business_key}"


def call_idempotency_key(run_id: str, tenant: str | None, action: str, target: str, arguments_hash: str,
                         business_key: str | None) -> str:
    """The one key a call is sent with: the business key's when it has one, else the per-run key."""
    if business_key is not None:
        return business_idempotency_key(tenant, business_key)
    return idempotency_key(run_id, action, target, arguments_hash)
