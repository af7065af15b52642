"""HTTP routing of the simulated payment provider (see payment_sim for the API)."""

from __future__ import annotations

import hmac
import json
import logging
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler
from typing import TYPE_CHECKING, Any, Literal, TypeVar
from urllib.parse import unquote

from pydantic import BaseModel, ConfigDict, ValidationError
from pydantic.alias_generators import to_camel

from runfacts.dev.provider.book import RefundRequest, Reply

if TYPE_CHECKING:
    from runfacts.dev.provider.server import PaymentSimulator

log = logging.getLogger(__name__)
MAX_BODY = 64 * 1024
_Model = TypeVar("_Model", bound=BaseModel)


class SettleRequest(BaseModel):
    """The JSON body of `POST /_settle`."""

    model_config = ConfigDict(frozen=True, extra="forbid", alias_generator=to_camel)

    refund_id: str
    outcome: Literal["succeeded", "failed"]


class _Refused(Exception):
    """Raised inside a route to answer with `reply` at once (bad body, bad switch)."""

    def __init__(self, reply: Reply) -> None:
        self.reply = reply
        super().__init__(reply.body)


def _invalid(detail: str) -> _Refused:
    return _Refused(Reply(422, {"error": "invalid_request", "detail": detail}))


class ProviderHandler(BaseHTTPRequestHandler):
    """Routes requests to the simulator; one thread per connection, HTTP/1.0 (close)."""

    server_version = "payment-sim/1"

    @property
    def sim(self) -> PaymentSimulator:
        return self.server.sim  # type: ignore[attr-defined]

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
        log.debug("%s " + format, self.address_string(), *args)

    def do_GET(self) -> None:
        self._answer(self._route_get)

    def do_POST(self) -> None:
        self._answer(self._route_post)

    def _answer(self, route: Callable[[str], None]) -> None:
        try:
            route(unquote(self.path.split("?", 1)[0]))
        except _Refused as refused:
            self._send(refused.reply)

    def _route_get(self, path: str) -> None:
        if path.startswith("/refunds/"):
            self._authorized(lambda: self._get_refund(path))
        elif path == "/_ledger":
            refunds = [r.body() for r in self.sim.ledger()]
            self._send(Reply(200, {"count": len(refunds), "refunds": refunds}))
        elif path == "/_faults":
            self._send(Reply(200, self.sim.faults.model_dump(by_alias=True)))
        elif path == "/_health":
            self._send(Reply(200, {"status": "ok"}))
        else:
            self._send(Reply(404, {"error": "no_route", "detail": path}))

    def _route_post(self, path: str) -> None:
        parts = path.strip("/").split("/")
        if path == "/refunds":
            self._authorized(self._post_refund)
        elif len(parts) == 3 and parts[0] == "refunds" and parts[2] == "cancel":
            self._authorized(lambda: self._cancel(parts[1]))
        elif path.startswith("/_"):
            self._admin(path)
        else:
            self._send(Reply(404, {"error": "no_route", "detail": path}))

    def _authorized(self, action: Callable[[], None]) -> None:
        given = self.headers.get("Authorization", "").removeprefix("Bearer ")
        if not hmac.compare_digest(given.encode(), self.sim.settings.api_key.encode()):
            self._send(Reply(401, {"error": "unauthorized", "detail": "bad or missing API key"}))
            return
        action()

    def _get_refund(self, path: str) -> None:
        rest = path.removeprefix("/refunds/")
        if rest.startswith("by-request/"):
            refund = self.sim.book.find_by_request(rest.removeprefix("by-request/"))
        else:
            refund = self.sim.book.get(rest)
        reply = Reply(200, refund.body()) if refund else Reply(
            404, {"error": "not_found", "detail": rest})
        self._send(reply, delayed=True)

    def _post_refund(self) -> None:
        request = self._parse(RefundRequest)
        fault, faults = self.sim.take_fault()
        if fault == "429":
            self._send(Reply(429, {"error": "rate_limited", "detail": "slow down"}),
                       headers={"Retry-After": str(faults.retry_after_s)})
            return
        if fault == "5xx":
            error = {"error": "provider_error", "detail": "injected"}
            self._send(Reply(faults.error_status, error))
            return
        reply = self.sim.book.refund(request, pending=faults.pending, key_ttl_ms=faults.key_ttl_ms)
        self.sim.notify(reply)
        if fault == "drop" and reply.status < 400:
            self.sim.consume_drop()
            self.close_connection = True  # executed; the response is lost
            return
        self._send(reply, delayed=True)

    def _cancel(self, refund_id: str) -> None:
        reply = self.sim.book.cancel(refund_id)
        self.sim.notify(reply)
        self._send(reply, delayed=True)

    def _admin(self, path: str) -> None:
        if path == "/_faults":
            self._faults_update(self._json())
        elif path == "/_faults/reset":
            self._send(Reply(200, self.sim.reset_faults().model_dump(by_alias=True)))
        elif path == "/_settle":
            settle = self._parse(SettleRequest)
            self._send(self.sim.settle(settle.refund_id, settle.outcome))
        else:
            self._send(Reply(404, {"error": "no_route", "detail": path}))

    def _faults_update(self, body: Any) -> None:
        if not isinstance(body, dict):
            raise _invalid("expected a JSON object")
        try:
            faults = self.sim.set_faults(**body)
        except ValidationError as exc:
            raise _invalid(_first_error(exc)) from exc
        self._send(Reply(200, faults.model_dump(by_alias=True)))

    def _json(self) -> Any:
        length = int(self.headers.get("Content-Length") or 0)
        if length > MAX_BODY:
            raise _Refused(Reply(413, {"error": "too_large", "detail": f"{length} bytes"}))
        try:
            return json.loads(self.rfile.read(length) or b"null")
        except ValueError as exc:
            raise _Refused(Reply(400, {"error": "invalid_json", "detail": str(exc)})) from exc

    def _parse(self, model: type[_Model]) -> _Model:
        body = self._json()
        try:
            return model.model_validate(body)
        except ValidationError as exc:
            raise _invalid(_first_error(exc)) from exc

    def _send(self, reply: Reply, *, delayed: bool = False,
              headers: dict[str, str] | None = None) -> None:
        if delayed and self.sim.faults.latency_ms:
            time.sleep(self.sim.faults.latency_ms / 1000)
        data = json.dumps(reply.body).encode()
        self.send_response(reply.status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(data)


def _first_error(exc: ValidationError) -> str:
    first = exc.errors()[0]
    where = ".".join(str(part) for part in first["loc"]) or "body"
    return f"{where}: {first['msg']} (got {first.get('input')!r})"
