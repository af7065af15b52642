"""A simulated payment provider: a real HTTP service on 127.0.0.1 with fault injection.

API (JSON; /refunds* need `Authorization: Bearer <api key>`):
- `POST /refunds` {idempotencyKey, externalRequestId, orderId, amountMinor, currency,
  leaseEpoch} -> 201 refund | 200 replayed refund | 402 refund_declined | 409 stale_epoch
  / idempotency_key_reuse | 400/422 invalid_request | 401 unauthorized
- `GET /refunds/by-request/{externalRequestId}` -> 200 refund | 404 not_found
- `GET /refunds/{refundId}` -> 200 refund | 404 not_found
- `POST /refunds/{refundId}/cancel` -> 200 canceled | 409 not_cancelable | 404
Test control (no key; the server binds to loopback only):
- `GET|POST /_faults` read / merge fault switches (`Faults`), `POST /_faults/reset`
- `GET /_ledger` -> {count, refunds}: executed refunds, the ground truth
- `POST /_settle` {refundId, outcome: succeeded|failed} finishes a pending refund

Faults apply to `POST /refunds` in this order: next-N 429 (Retry-After), next-N 5xx (the
refund is NOT executed), then the book executes, then `acceptThenDropNext` closes the
connection without a response (executed, response lost). `latencyMs` delays every
/refunds* response after the work is done, so a client timeout leaves an executed refund.
Callbacks (`callbackUrl`) are POSTed on every status change, twice with
`duplicateCallbacks`, with a stable `eventId` per (refund, status). `keyTtlMs` makes
idempotency keys expire that long after their first use (the same key then refunds again,
as with real providers); the by-request lookup never expires.

Run as a process: `python -m runfacts.dev.provider.server --port N --ledger FILE`
(api key from $RUNFACTS_PAYMENT_API_KEY or --api-key-file); it prints its URL.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import signal
import sys
import threading
import urllib.request
from dataclasses import dataclass
from http.server import ThreadingHTTPServer
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel

from runfacts.dev.provider.book import Refund, RefundBook, Reply
from runfacts.dev.provider.http import ProviderHandler
from runfacts.schemas.errors import ConfigError

log = logging.getLogger(__name__)
API_KEY_ENV = "RUNFACTS_PAYMENT_API_KEY"


class Faults(BaseModel):
    """Fault switches; counters (`...Next`) are consumed one per POST /refunds."""

    model_config = ConfigDict(
        frozen=True, extra="forbid", alias_generator=to_camel, validate_by_name=True
    )

    latency_ms: int = Field(default=0, ge=0, le=60_000)
    rate_limit_next: int = Field(default=0, ge=0)
    retry_after_s: int = Field(default=1, ge=0)
    error_next: int = Field(default=0, ge=0)
    error_status: int = Field(default=500, ge=500, le=599)
    accept_then_drop_next: int = Field(default=0, ge=0)
    duplicate_callbacks: bool = False
    callback_url: str | None = None
    pending: bool = False
    key_ttl_ms: int = Field(default=0, ge=0)  # idempotency keys forgotten after this long (0: never)


@dataclass(frozen=True)
class SimSettings:
    """Where the simulator listens, the key it accepts, where its ledger goes."""

    api_key: str
    host: str = "127.0.0.1"
    port: int = 0
    ledger_path: Path | None = None
    max_amount_minor: int = 1_000_000


class PaymentSimulator:
    """The provider, in-process: `start()` returns its URL, `stop()` closes it."""

    def __init__(self, settings: SimSettings) -> None:
        if not settings.api_key:
            raise ConfigError("api_key", "", "the simulator needs a non-empty API key")
        self.settings = settings
        self.book = RefundBook(settings.ledger_path, settings.max_amount_minor)
        self._faults = Faults()
        self._lock = threading.Lock()
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        if self._server is None:
            raise RuntimeError("payment simulator is not started")
        return f"http://{self.settings.host}:{self._server.server_address[1]}"

    def start(self) -> str:
        """Listen (port 0 picks a free port) and serve in a daemon thread; return the URL."""
        server = ThreadingHTTPServer((self.settings.host, self.settings.port), ProviderHandler)
        server.daemon_threads = True
        server.block_on_close = False
        server.sim = self  # type: ignore[attr-defined]
        self._server = server
        self._thread = threading.Thread(target=server.serve_forever, name="payment-sim",
                                        kwargs={"poll_interval": 0.05}, daemon=True)
        self._thread.start()
        return self.url

    def stop(self) -> None:
        """Stop serving and close the socket (idempotent)."""
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None

    def __enter__(self) -> PaymentSimulator:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def faults(self) -> Faults:
        with self._lock:
            return self._faults

    def set_faults(self, **changes: Any) -> Faults:
        """Merge `changes` (field names or camelCase aliases) into the fault switches."""
        with self._lock:
            merged = self._faults.model_dump() | Faults.model_validate(changes).model_dump(
                exclude_unset=True)
            self._faults = Faults.model_validate(merged)
            return self._faults

    def reset_faults(self) -> Faults:
        with self._lock:
            self._faults = Faults()
            return self._faults

    def take_fault(self) -> tuple[Literal["429", "5xx", "drop", ""], Faults]:
        """Consume the first armed one-shot fault of this request (see module docstring)."""
        with self._lock:
            faults = self._faults
            for field, kind in (("rate_limit_next", "429"), ("error_next", "5xx"),
                                ("accept_then_drop_next", "drop")):
                if getattr(faults, field) > 0:
                    if kind != "drop":
                        self._faults = faults.model_copy(update={field: getattr(faults, field) - 1})
                    return kind, faults  # type: ignore[return-value]
            return "", faults

    def consume_drop(self) -> None:
        with self._lock:
            count = max(0, self._faults.accept_then_drop_next - 1)
            self._faults = self._faults.model_copy(update={"accept_then_drop_next": count})

    def ledger(self) -> list[Refund]:
        """Executed refunds: the ground truth."""
        return self.book.ledger()

    def settle(self, refund_id: str, outcome: Literal["succeeded", "failed"]) -> Reply:
        """Finish a pending refund and send its callback."""
        reply = self.book.settle(refund_id, outcome)
        self.notify(reply)
        return reply

    def notify(self, reply: Reply) -> None:
        """POST the callback for a status change (twice with duplicate callbacks)."""
        faults = self.faults
        if reply.changed is None or not faults.callback_url:
            return
        refund = reply.changed
        payload = {"eventId": f"{refund.refund_id}:{refund.status}", "refund": refund.body()}
        copies = 2 if faults.duplicate_callbacks else 1
        threading.Thread(target=_deliver, args=(faults.callback_url, payload, copies),
                         name="payment-sim-callback", daemon=True).start()


def _deliver(url: str, payload: dict[str, Any], copies: int) -> None:
    data = json.dumps(payload).encode()
    for _ in range(copies):
        request = urllib.request.Request(url, data=data, method="POST",
                                         headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(request, timeout=2) as response:
                response.read()
        except OSError as exc:
            log.warning("callback to %s failed: %s", url, exc)


def api_key_from(env: dict[str, str], key_file: Path | None) -> str:
    """The API key: the secret file when given, else $RUNFACTS_PAYMENT_API_KEY."""
    if key_file is not None:
        try:
            key = key_file.read_text(encoding="utf-8").strip()
        except OSError as exc:
            raise ConfigError("api-key-file", str(key_file), f"cannot read: {exc}") from exc
    else:
        key = env.get(API_KEY_ENV, "").strip()
    if not key:
        raise ConfigError(API_KEY_ENV, "", "set it or pass --api-key-file")
    return key


def serve(settings: SimSettings) -> None:
    """Run until SIGTERM/SIGINT; print the URL first so a parent process can read it."""
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    with PaymentSimulator(settings) as sim:
        print(f"payment-sim listening on {sim.url}", flush=True)
        stop.wait()


def main(argv: list[str] | None = None) -> None:
    """`python -m runfacts.dev.provider.server --port N --ledger FILE`."""
    parser = argparse.ArgumentParser(prog="payment_sim", description=__doc__.split("\n")[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8480, help="0 picks a free port")
    parser.add_argument("--ledger", type=Path, default=None)
    parser.add_argument("--api-key-file", type=Path, default=None)
    parser.add_argument("--max-amount-minor", type=int, default=1_000_000)
    args = parser.parse_args(argv)
    try:
        key = api_key_from(dict(os.environ), args.api_key_file)
    except ConfigError as exc:
        sys.exit(f"payment_sim: {exc}")
    serve(SimSettings(api_key=key, host=args.host, port=args.port, ledger_path=args.ledger,
                      max_amount_minor=args.max_amount_minor))


if __name__ == "__main__":
    main()
