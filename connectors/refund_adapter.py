"""`RefundAdapter`: the `ToolAdapter` for refunds at the payment provider, over HTTP.

Each call is one HTTP exchange on a fresh connection, in two observed phases: connect
(a failure here cannot have reached the provider: retryable) and send + read (a failure
here may follow an executed refund: `ToolUnknown` for `execute`, a retryable
`LookupUnknown` for `lookup`). The API key comes from RUNFACTS_PAYMENT_API_KEY or the
file named by RUNFACTS_PAYMENT_API_KEY_FILE.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from http.client import HTTPConnection, HTTPException, HTTPSConnection
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlsplit

from pydantic import BaseModel, Field, SecretStr, StrictInt, ValidationError
from pydantic_settings import BaseSettings, SettingsConfigDict

from runfacts.connectors.adapters import (
    CAMEL,
    FoundCompleted,
    FoundFailed,
    LookupOutcome,
    LookupUnknown,
    NotFound,
    ToolCompleted,
    ToolFailed,
    ToolOutcome,
    ToolRequest,
    ToolUnknown,
    Verification,
)
from runfacts.processors.retry import (
    ErrorClass,
    Observation,
    Phase,
    args_hash,
    canonical_json,
    classify,
    classify_status,
    is_retryable,
)
from runfacts.schemas.errors import ConfigError


class RefundAdapterSettings(BaseSettings):
    """Where the payment provider is and how long to wait; env prefix RUNFACTS_PAYMENT_."""

    model_config = SettingsConfigDict(env_prefix="RUNFACTS_PAYMENT_", frozen=True, extra="ignore")

    url: str = "http://127.0.0.1:8480"
    api_key: SecretStr | None = None
    api_key_file: Path | None = None
    connect_timeout_ms: int = Field(default=1000, ge=1)
    read_timeout_ms: int = Field(default=5000, ge=1)

    def resolved_api_key(self) -> str:
        """The API key: `api_key` (RUNFACTS_PAYMENT_API_KEY) or the secret file's content."""
        if self.api_key is not None and self.api_key.get_secret_value():
            return self.api_key.get_secret_value()
        if self.api_key_file is None:
            why = "set it, or RUNFACTS_PAYMENT_API_KEY_FILE"
            raise ConfigError("RUNFACTS_PAYMENT_API_KEY", None, why)
        try:
            key = self.api_key_file.read_text(encoding="utf-8").strip()
        except OSError as exc:
            raise ConfigError("RUNFACTS_PAYMENT_API_KEY_FILE", str(self.api_key_file),
                              f"cannot read: {exc}") from exc
        if not key:
            raise ConfigError("RUNFACTS_PAYMENT_API_KEY_FILE", str(self.api_key_file), "empty")
        return key


class RefundArguments(BaseModel):
    """The arguments a `payments.refund` call must carry."""

    model_config = CAMEL

    order_id: str = Field(min_length=1)
    amount_minor: StrictInt = Field(gt=0)
    currency: str = Field(pattern=r"^[A-Z]{3}$")


@dataclass(frozen=True)
class _Response:
    status: int
    body: dict[str, Any]
    retry_after_ms: int | None


class _TransportFailure(Exception):
    def __init__(self, phase: Phase, exc: BaseException) -> None:
        self.phase = phase
        self.name = type(exc).__name__
        super().__init__(f"{self.name} {phase}: {exc}")


_VERIFICATION = {
    "pending": Verification.PENDING,
    "succeeded": Verification.CONFIRMED_SUCCESS,
    "failed": Verification.CONFIRMED_FAILURE,
    "canceled": Verification.CONFIRMED_FAILURE,
}


class RefundAdapter:
    """`ToolAdapter` for refunds at the (simulated) payment provider, over HTTP."""

    def __init__(self, settings: RefundAdapterSettings) -> None:
        parts = urlsplit(settings.url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ConfigError("RUNFACTS_PAYMENT_URL", settings.url, "expected http(s)://host:port")
        self._settings = settings
        self._parts = parts
        self._api_key = settings.resolved_api_key()

    def execute(self, request: ToolRequest) -> ToolOutcome:
        """POST /refunds once; a lost answer after the request was written is ToolUnknown."""
        try:
            args = RefundArguments.model_validate(request.arguments)
        except ValidationError as exc:
            return ToolFailed.of(ErrorClass.VALIDATION, "invalid_arguments", detail=str(exc))
        body = {"idempotencyKey": request.idempotency_key,
                "externalRequestId": request.external_request_id,
                "leaseEpoch": request.lease_epoch, **args.model_dump(by_alias=True)}
        try:
            response = self._call("POST", "/refunds", body)
        except _TransportFailure as failure:
            return _transport_outcome(failure)
        if 200 <= response.status < 300:
            return _completed(response.body)
        return _failed(response)

    def lookup(self, external_request_id: str) -> LookupOutcome:
        """GET /refunds/by-request/{id}: found (completed | failed), not found, or unknown."""
        try:
            path = f"/refunds/by-request/{quote(external_request_id, safe='')}"
            response = self._call("GET", path)
        except _TransportFailure as failure:
            return LookupUnknown(reason=str(failure), retryable=True)
        if response.status == 200:
            return _found(response.body)
        code = str(response.body.get("error", ""))
        if response.status == 404 and code == "not_found":
            return NotFound()
        error = classify_status(response.status, code) if response.status >= 400 else None
        return LookupUnknown(reason=f"HTTP {response.status} {code}".strip(),
                             retryable=error is not None and is_retryable(error))

    def cancel(self, external_request_id: str) -> bool:
        """Cancel the refund behind the request while it is pending; True when canceled."""
        found = self.lookup(external_request_id)
        if not isinstance(found, FoundCompleted):
            return False
        if found.provider_status == "canceled":
            return True
        try:
            response = self._call("POST", f"/refunds/{quote(found.result_ref, safe='')}/cancel")
        except _TransportFailure:
            return False
        return response.status == 200 and response.body.get("status") == "canceled"

    def _call(self, method: str, path: str, body: dict[str, Any] | None = None) -> _Response:
        """One HTTP exchange; raises _TransportFailure saying whether the request left."""
        settings = self._settings
        kind = HTTPSConnection if self._parts.scheme == "https" else HTTPConnection
        conn = kind(self._parts.hostname or "", self._parts.port,
                    timeout=settings.connect_timeout_ms / 1000)
        try:
            try:
                conn.connect()
            except OSError as exc:
                raise _TransportFailure(Phase.BEFORE_SEND, exc) from exc
            conn.sock.settimeout(settings.read_timeout_ms / 1000)
            try:
                conn.request(method, self._parts.path.rstrip("/") + path,
                             body=None if body is None else json.dumps(body).encode(),
                             headers=self._headers())
                response = conn.getresponse()
                raw = response.read()
            except (OSError, HTTPException) as exc:
                raise _TransportFailure(Phase.AFTER_SEND, exc) from exc
        finally:
            conn.close()
        return _Response(response.status, _json_object(raw),
                         _retry_after_ms(response.getheader("Retry-After")))

    def _headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self._api_key}", "Content-Type": "application/json",
                "Accept": "application/json"}


def _json_object(raw: bytes) -> dict[str, Any]:
    try:
        value = json.loads(raw or b"{}")
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


def _retry_after_ms(header: str | None) -> int | None:
    """Retry-After in delta-seconds as milliseconds (an HTTP-date is ignored)."""
    if header is None or not header.strip().isdigit():
        return None
    return int(header.strip()) * 1000


_STABLE = ("refundId", "idempotencyKey", "orderId", "amountMinor", "currency")


def _result_hash(refund: dict[str, Any]) -> str:
    """Hash of the refund's stable facts: the same from execute and from lookup."""
    return args_hash({name: refund.get(name) for name in _STABLE})


def _result(refund: dict[str, Any]) -> str:
    """The result value the agent gets: the refund's stable facts but its key, as canonical JSON
    (so `resultHash`, which is not personal data, is not a plain digest of this personal value)."""
    return canonical_json({name: refund.get(name) for name in _STABLE if name != "idempotencyKey"}).decode()


def _transport_outcome(failure: _TransportFailure) -> ToolOutcome:
    error = classify(Observation(failure.phase, code=failure.name), side_effect=True)
    if error is ErrorClass.UNKNOWN_OUTCOME:
        return ToolUnknown(reason=str(failure))
    return ToolFailed.of(error, failure.name, detail=str(failure))


def _completed(refund: dict[str, Any]) -> ToolOutcome:
    status = str(refund.get("status", ""))
    if not refund.get("refundId") or status not in _VERIFICATION:
        return ToolUnknown(reason=f"2xx without a readable refund: {refund!r}"[:300])
    return ToolCompleted(result_ref=str(refund["refundId"]), result_hash=_result_hash(refund),
                         provider_status=status, verification=_VERIFICATION[status],
                         replayed=bool(refund.get("replayed", False)), result=_result(refund))


def _failed(response: _Response) -> ToolOutcome:
    code = str(response.body.get("error", ""))
    error = classify_status(response.status, code) if response.status >= 400 else None
    if error is None:
        return ToolUnknown(reason=f"unexpected HTTP {response.status}")
    return ToolFailed.of(error, code or f"http_{response.status}",
                         detail=str(response.body.get("detail", "")), http_status=response.status,
                         retry_after_ms=response.retry_after_ms)


def _found(refund: dict[str, Any]) -> LookupOutcome:
    status = str(refund.get("status", ""))
    if status == "declined":
        return FoundFailed(error_class=ErrorClass.REFUSED, code="refund_declined",
                           detail=f"refund {refund.get('refundId')} was declined")
    if not refund.get("refundId") or status not in _VERIFICATION:
        return LookupUnknown(reason=f"unreadable refund: {refund!r}"[:300], retryable=False)
    return FoundCompleted(result_ref=str(refund["refundId"]), result_hash=_result_hash(refund),
                          provider_status=status, verification=_VERIFICATION[status],
                          result=_result(refund))
