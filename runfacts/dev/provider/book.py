"""The simulated payment provider's book: refunds by idempotency key, fencing, the ledger.

Rules (what the tests count on):
1. One refund per idempotency key. A repeated key returns the FIRST result (same
   refundId, same status code), never a second ledger entry; the same key with other
   order/amount/currency is a 409 `idempotency_key_reuse`.
2. Fencing: a request whose leaseEpoch is below the highest epoch seen for its key is a
   409 `stale_epoch` and changes nothing.
3. Every externalRequestId that reached the book finds its refund by lookup.
4. A refund above `max_amount_minor` is declined (402 `refund_declined`): recorded and
   replayed like any result, but not an executed refund, so not in `ledger()`.
5. With a ledger file, every change is appended as one JSON line and flushed before the
   reply; a new book over the same file folds it back (the book survives restarts).
"""

from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StrictInt
from pydantic.alias_generators import to_camel

_CAMEL = ConfigDict(frozen=True, extra="forbid", alias_generator=to_camel, validate_by_name=True)
RefundStatus = Literal["pending", "succeeded", "failed", "canceled", "declined"]


class RefundRequest(BaseModel):
    """The JSON body of `POST /refunds`."""

    model_config = _CAMEL

    idempotency_key: str = Field(min_length=1, max_length=255)
    external_request_id: str = Field(min_length=1, max_length=255)
    order_id: str = Field(min_length=1, max_length=255)
    amount_minor: StrictInt = Field(gt=0)
    currency: str = Field(pattern=r"^[A-Z]{3}$")
    lease_epoch: StrictInt = Field(ge=0)


class Refund(BaseModel):
    """One refund the provider knows about (executed or declined)."""

    model_config = _CAMEL

    refund_id: str
    idempotency_key: str
    external_request_ids: tuple[str, ...]
    order_id: str
    amount_minor: int
    currency: str
    lease_epoch: int
    status: RefundStatus

    def body(self) -> dict[str, Any]:
        """The provider's JSON view of this refund."""
        return self.model_dump(mode="json", by_alias=True)

    def same_input(self, req: RefundRequest) -> bool:
        return (self.order_id, self.amount_minor, self.currency) == (
            req.order_id, req.amount_minor, req.currency)


@dataclass(frozen=True)
class Reply:
    """An HTTP answer from the book; `changed` is the refund whose status just changed."""

    status: int
    body: dict[str, Any]
    changed: Refund | None = None


def _error(status: int, code: str, detail: str, **extra: Any) -> Reply:
    return Reply(status, {"error": code, "detail": detail, **extra})


def _status_code(refund: Refund) -> int:
    return 402 if refund.status == "declined" else 201


class RefundBook:
    """Thread-safe refund state of the simulator, optionally persisted to a JSON-lines file."""

    def __init__(self, ledger_path: Path | None = None, max_amount_minor: int = 1_000_000) -> None:
        self._lock = threading.Lock()
        self._path = ledger_path
        self._max_amount = max_amount_minor
        self._refunds: dict[str, Refund] = {}
        self._by_key: dict[str, str] = {}
        self._by_request: dict[str, str] = {}
        self._key_at: dict[str, float] = {}  # when a key was first used (monotonic s), for key_ttl_ms
        if ledger_path is not None and ledger_path.exists():
            for refund in fold_ledger_file(ledger_path).values():
                self._index(refund)

    def refund(self, req: RefundRequest, *, pending: bool, key_ttl_ms: int = 0) -> Reply:
        """Execute `req` once per idempotency key (rules 1-4). With `key_ttl_ms` > 0 a key is
        forgotten that long after its first use, as real providers' keys expire (Stripe's after
        24 h): the same key then executes again. Lookups by request id never expire."""
        with self._lock:
            first = self._key_at.setdefault(req.idempotency_key, time.monotonic())
            if key_ttl_ms and (time.monotonic() - first) * 1000 > key_ttl_ms:
                self._by_key.pop(req.idempotency_key, None)
                self._key_at[req.idempotency_key] = time.monotonic()
            existing = self._refunds.get(self._by_key.get(req.idempotency_key, ""))
            if existing is None:
                return self._create(req, pending)
            if req.lease_epoch < existing.lease_epoch:
                return _error(409, "stale_epoch", f"leaseEpoch {req.lease_epoch} < "
                              f"{existing.lease_epoch} seen for {req.idempotency_key}")
            if not existing.same_input(req):
                return _error(409, "idempotency_key_reuse",
                              f"key {req.idempotency_key} was used with other input")
            return self._replay(existing, req)

    def _create(self, req: RefundRequest, pending: bool) -> Reply:
        declined = req.amount_minor > self._max_amount
        status: RefundStatus = "declined" if declined else "pending" if pending else "succeeded"
        refund = Refund(
            refund_id=f"re_{len(self._refunds) + 1:06d}", idempotency_key=req.idempotency_key,
            external_request_ids=(req.external_request_id,), order_id=req.order_id,
            amount_minor=req.amount_minor, currency=req.currency, lease_epoch=req.lease_epoch,
            status=status)
        self._append({"kind": "refund", "refund": refund.body()})
        self._index(refund)
        body = refund.body() | {"replayed": False}
        if declined:
            body |= {"error": "refund_declined", "detail": f"amount above {self._max_amount}"}
        return Reply(_status_code(refund), body, changed=refund)

    def _replay(self, existing: Refund, req: RefundRequest) -> Reply:
        ids = existing.external_request_ids
        if req.external_request_id not in ids:
            ids = (*ids, req.external_request_id)
        updated = existing.model_copy(update={"external_request_ids": ids,
                                              "lease_epoch": req.lease_epoch})
        if updated != existing:
            self._update(updated)
        body = updated.body() | {"replayed": True}
        if updated.status == "declined":
            body |= {"error": "refund_declined", "detail": "replayed decline"}
        return Reply(_status_code(updated), body)

    def find_by_request(self, external_request_id: str) -> Refund | None:
        """The refund that request `external_request_id` reached, if any."""
        with self._lock:
            return self._refunds.get(self._by_request.get(external_request_id, ""))

    def get(self, refund_id: str) -> Refund | None:
        with self._lock:
            return self._refunds.get(refund_id)

    def cancel(self, refund_id: str) -> Reply:
        """Cancel a pending refund; a canceled one stays canceled (idempotent)."""
        return self._transition(refund_id, "canceled", "not_cancelable")

    def settle(self, refund_id: str, outcome: Literal["succeeded", "failed"]) -> Reply:
        """Finish a pending refund (the 'bank' answered)."""
        return self._transition(refund_id, outcome, "not_pending")

    def _transition(self, refund_id: str, to: RefundStatus, refusal: str) -> Reply:
        """Move a pending refund to `to`; anything but pending is refused with `refusal`."""
        with self._lock:
            refund = self._refunds.get(refund_id)
            if refund is None:
                return _error(404, "not_found", f"no refund {refund_id}")
            if refund.status == to:
                return Reply(200, refund.body())
            if refund.status != "pending":
                return _error(409, refusal, f"refund {refund_id} is {refund.status}")
            updated = refund.model_copy(update={"status": to})
            self._update(updated)
            return Reply(200, updated.body(), changed=updated)

    def ledger(self) -> list[Refund]:
        """Executed refunds (everything but declines), in execution order."""
        with self._lock:
            return [r for r in self._refunds.values() if r.status != "declined"]

    def _update(self, refund: Refund) -> None:
        self._append({"kind": "update", "refund": refund.body()})
        self._index(refund)

    def _index(self, refund: Refund) -> None:
        self._refunds[refund.refund_id] = refund
        self._by_key[refund.idempotency_key] = refund.refund_id
        for request_id in refund.external_request_ids:
            self._by_request[request_id] = refund.refund_id

    def _append(self, line: dict[str, Any]) -> None:
        if self._path is None:
            return
        with self._path.open("a", encoding="utf-8") as fh:
            fh.write(json.dumps(line, sort_keys=True) + "\n")
            fh.flush()


def fold_ledger_file(path: Path) -> dict[str, Refund]:
    """Every refund in a ledger file, latest version of each, in creation order."""
    refunds: dict[str, Refund] = {}
    for number, raw in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if not raw.strip():
            continue
        try:
            refund = Refund.model_validate(json.loads(raw)["refund"])
        except (ValueError, KeyError) as exc:
            raise ValueError(f"{path}:{number}: not a ledger line: {exc}") from exc
        refunds[refund.refund_id] = refund
    return refunds


def read_ledger(path: Path) -> list[Refund]:
    """Executed refunds recorded in a ledger file (for a test in another process)."""
    if not path.exists():
        return []
    return [r for r in fold_ledger_file(path).values() if r.status != "declined"]
