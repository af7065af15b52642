"""The gateway's ASGI app (shell): authentication, limits, idempotency, problem documents, and
one handler per operation of `openapi.OPERATIONS` (the document and the routes cannot differ).

Every POST needs `Authorization: Bearer <key>` and an `Idempotency-Key`: the same key with the
same body answers what it answered the first time (kept `idempotency_ttl_s`), with another body
a 422 problem, while the first is still running a 409 with Retry-After. Bodies over
`max_body_bytes` are refused (413) before they are read; each key has a token bucket (429 with
Retry-After). Bad input is a 4xx problem document naming the field; the broker or a decider that
does not answer is a 503 with Retry-After.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import logging
import re
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import anyio
from pydantic import BaseModel, ValidationError
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from runfacts.gateway import models as m
from runfacts.gateway.keys import ApiKey, ApiKeys
from runfacts.gateway.limits import Idempotency, RateLimits, Stored
from runfacts.gateway.openapi import OPERATIONS, Operation, document
from runfacts.gateway.problems import MEDIA_TYPE, ProblemError, from_error, invalid_body
from runfacts.gateway.service import Service, command_id_for
from runfacts.gateway.streams import (
    RunStream,
    StreamSettings,
    TopicHub,
    decode_event,
    decode_output,
    decode_view,
    output_filter,
    parse_position,
)
from runfacts.schemas.codec import Codec

log = logging.getLogger("runfacts.gateway")
IDEMPOTENCY_KEY_CHARS = 200


@dataclass(frozen=True)
class GatewaySettings:
    max_body_bytes: int = 64 * 1024
    rate_per_s: float = 50.0
    burst: float = 100.0
    idempotency_ttl_s: float = 24 * 3600.0
    idempotency_capacity: int = 100_000
    threads: int = 64
    """Requests waiting on the decider at once (each holds a worker thread while it waits)."""
    streams: StreamSettings = field(default_factory=StreamSettings)


class Gateway:
    """What the app needs: the keys, the service over the client, the limits."""

    def __init__(self, keys: ApiKeys, service: Service, settings: GatewaySettings = GatewaySettings()) -> None:
        self.keys, self.service, self.settings = keys, service, settings
        self.limits = RateLimits(settings.rate_per_s, settings.burst)
        self.idempotency = Idempotency(settings.idempotency_ttl_s, settings.idempotency_capacity)
        self.limiter = anyio.CapacityLimiter(settings.threads)
        self.codec = Codec()
        self._hubs: dict[str, TopicHub] = {}
        self._hub_lock = asyncio.Lock()

    async def hub(self, topic: str, decode: Any) -> TopicHub:
        """The one tailing reader of `topic` every stream of it shares (started on first use)."""
        async with self._hub_lock:
            hub = self._hubs.get(topic)
            if hub is None:
                hub = TopicHub(self.service.rf.kafka, topic, decode, poll_s=self.settings.streams.poll_s)
                await self.blocking(hub.start)
                self._hubs[topic] = hub
            return hub

    def close(self) -> None:
        """Stop the hubs (their streams end with a retry hint)."""
        for hub in self._hubs.values():
            hub.close()
        self._hubs.clear()

    async def blocking(self, fn: Callable[..., Any], *args: Any) -> Any:
        return await anyio.to_thread.run_sync(fn, *args, limiter=self.limiter)


def problem(exc: ProblemError) -> Response:
    return JSONResponse(exc.document, exc.status, headers=exc.headers, media_type=MEDIA_TYPE)


def authenticate(gateway: Gateway, request: Request, query_ok: bool = False) -> ApiKey:
    header = request.headers.get("authorization", "")
    secret = header[7:].strip() if header[:7].lower() == "bearer " else ""
    if not secret and query_ok:
        secret = request.query_params.get("access_token", "")
    found = gateway.keys.find(secret) if secret else None
    if found is None:
        raise ProblemError(401, "unauthenticated", "No valid API key",
                           "missing Authorization header" if not secret else "the API key is not known",
                           field="Authorization", fix="send Authorization: Bearer <your API key>",
                           headers={"WWW-Authenticate": 'Bearer realm="runfacts"'})
    wait = gateway.limits.take(found.name, time.monotonic())
    if wait > 0:
        raise ProblemError(429, "rate-limited", "Too many requests for this key",
                           f"key {found.name} is over {gateway.settings.rate_per_s:g} requests/s",
                           fix="wait Retry-After seconds", headers={"Retry-After": str(max(1, round(wait)))})
    return found


async def read_json(gateway: Gateway, request: Request) -> Any:
    kind = request.headers.get("content-type", "application/json").split(";")[0].strip().lower()
    if kind != "application/json" and not kind.endswith("+json"):
        raise ProblemError(415, "unsupported-media-type", "The body must be JSON", f"Content-Type: {kind}",
                           field="Content-Type", fix="send Content-Type: application/json")
    cap = gateway.settings.max_body_bytes
    declared = request.headers.get("content-length")
    if declared is not None and (not declared.isdigit() or int(declared) > cap):
        raise ProblemError(413, "body-too-large", "The body is too large", f"Content-Length {declared[:20]} "
                           f"over {cap} bytes", field="(body)", fix=f"send at most {cap} bytes")
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > cap:
            raise ProblemError(413, "body-too-large", "The body is too large", f"over {cap} bytes",
                               field="(body)", fix=f"send at most {cap} bytes")
        chunks.append(chunk)
    raw = b"".join(chunks) or b"{}"
    try:
        return json.loads(raw)
    except (ValueError, RecursionError) as exc:
        raise ProblemError(400, "invalid-json", "The body is not JSON", str(exc)[:200], field="(body)",
                           fix="send a JSON object") from None


def idempotency_key(request: Request) -> str:
    key = request.headers.get("idempotency-key")
    if key is None:
        raise ProblemError(428, "idempotency-key-missing", "Idempotency-Key is required", "every POST needs one",
                           field="Idempotency-Key", fix="send Idempotency-Key: <a unique value per intended "
                                                        "change, reused on retry>")
    if not 0 < len(key) <= IDEMPOTENCY_KEY_CHARS or not key.isprintable():
        raise ProblemError(400, "idempotency-key-invalid", "Idempotency-Key is not usable",
                           f"{len(key)} characters", field="Idempotency-Key",
                           fix=f"1 to {IDEMPOTENCY_KEY_CHARS} printable characters")
    return key


Write = Callable[[Service, Any, dict[str, str], BaseModel, str], BaseModel]

WRITES: dict[str, Write] = {
    "startRun": lambda s, a, p, b, c: s.start(a, b, c),  # type: ignore[arg-type]
    "recordReasoning": lambda s, a, p, b, c: s.reason(a, p["run_id"], b, c),  # type: ignore[arg-type]
    "proposeCall": lambda s, a, p, b, c: s.propose(a, p["run_id"], b, c),  # type: ignore[arg-type]
    "stopRun": lambda s, a, p, b, c: s.end(a, p["run_id"], "stop", b, c),  # type: ignore[arg-type]
    "cancelRun": lambda s, a, p, b, c: s.end(a, p["run_id"], "cancel", b, c),  # type: ignore[arg-type]
    "decideApproval": lambda s, a, p, b, c: s.decide(a, p["run_id"], p["approval_id"], b, c),  # type: ignore[arg-type]
    "writeOutput": lambda s, a, p, b, c: s.output(a, p["run_id"], b),  # type: ignore[arg-type]
}


def path_params(request: Request) -> dict[str, str]:
    params = {k: str(v) for k, v in request.path_params.items()}
    for name, value in params.items():
        if not re.fullmatch(m.ID.strip("^$"), value):
            raise ProblemError(400, "bad-path", f"Not a valid {name}", f"{name}={value[:60]!r}", field=name,
                               fix="letters, digits and . _ : @ - (at most 200), starting with a letter or digit")
    return params


def write_handler(gateway: Gateway, op: Operation) -> Callable[[Request], Awaitable[Response]]:
    assert op.body is not None
    body_model = op.body

    async def handle(request: Request) -> Response:
        try:
            key = authenticate(gateway, request)
            params = path_params(request)
            idem = idempotency_key(request)
            data = await read_json(gateway, request)
            try:
                body = body_model.model_validate(data)
            except ValidationError as exc:
                raise invalid_body([dict(e) for e in exc.errors(include_input=False)]) from None
            print_ = json.dumps([op.id, params, data], sort_keys=True, separators=(",", ":"), default=str)
            fingerprint = hashlib.sha256(print_.encode("utf-8", "surrogatepass")).hexdigest()
        except ProblemError as exc:
            return problem(exc)
        what, stored = gateway.idempotency.begin(key.name, idem, fingerprint, time.monotonic())
        if what == "replay":
            assert stored is not None
            return _answer(stored, replayed=True)
        if what == "conflict":
            return problem(ProblemError(422, "idempotency-key-reused", "Idempotency-Key reused for another request",
                                        f"key {idem[:60]!r} was used with another body or path",
                                        field="Idempotency-Key",
                                        fix="use a new Idempotency-Key for a new request"))
        if what == "pending":
            return problem(ProblemError(409, "idempotency-key-in-flight", "The first request with this key is "
                                        "still running", f"Idempotency-Key {idem[:60]!r}", field="Idempotency-Key",
                                        fix="retry after Retry-After seconds", headers={"Retry-After": "1"}))
        result: Stored | None = None
        try:
            answer = await gateway.blocking(WRITES[op.id], gateway.service, key.actor, params, body,
                                            command_id_for(key.name, idem))
            status = op.status if getattr(answer, "created", True) else 200
            result = Stored(fingerprint, status, answer.model_dump(mode="json"), time.monotonic())
            return _answer(result)
        except Exception as exc:  # noqa: BLE001 - every error becomes a problem document
            try:
                found = from_error(exc)
            except Exception:
                log.exception("%s failed", op.id)
                found = ProblemError(500, "internal", "The gateway failed", type(exc).__name__,
                                     fix="report it with the request's Idempotency-Key")
            if found.status < 500:  # the decider's answer (or the input's): the same again on retry
                result = Stored(fingerprint, found.status, found.document, time.monotonic(),
                                tuple(found.headers.items()), problem=True)
            return problem(found)
        finally:
            gateway.idempotency.finish(key.name, idem, result)

    return handle


def _answer(stored: Stored, replayed: bool = False) -> Response:
    headers = {"Idempotent-Replayed": "true"} if replayed else {}
    if stored.problem:
        return JSONResponse(stored.body, stored.status, headers={**dict(stored.headers), **headers},
                            media_type=MEDIA_TYPE)
    if isinstance(stored.body, dict) and "version" in stored.body:
        headers["Runfacts-Version"] = str(stored.body["version"])
    return JSONResponse(stored.body, stored.status, headers=headers)


def number(request: Request, name: str, kind: type, low: float, high: float) -> Any:
    raw = request.query_params.get(name)
    if raw is None:
        return None
    try:
        value = kind(raw)
    except ValueError:
        value = None
    if value is None or not low <= value <= high or value != value:
        raise ProblemError(400, "bad-query", f"Not a valid {name}", f"{name}={raw[:40]!r}", field=name,
                           fix=f"a {'whole ' if kind is int else ''}number from {low:g} to {high:g}")
    return value


def wants_stream(request: Request) -> bool:
    return "text/event-stream" in request.headers.get("accept", "")


async def stream(gateway: Gateway, request: Request, run_id: str, topic: str, decode: Any,
                 admit: Any = None) -> Response:
    raw = request.headers.get("last-event-id")
    where = "Last-Event-ID"
    if raw is None and "last_event_id" in request.query_params:
        raw, where = request.query_params["last_event_id"], "last_event_id"
    after = None if raw is None or raw == "" else parse_position(raw, where)
    reader = RunStream(await gateway.hub(topic, decode), run_id, gateway.settings.streams, admit)
    reader.open(after, where)
    reader.start(asyncio.get_running_loop())
    return EventStreamResponse(reader)


class EventStreamResponse(Response):
    """A stream's SSE frames with one watcher task beside it (Starlette's StreamingResponse holds a
    task group of two per response: ~15 KB an open stream more; benchmarks/gateway_bench.py
    --streams holds 10,000)."""

    media_type = "text/event-stream"
    HEADERS = [(b"cache-control", b"no-store"), (b"x-accel-buffering", b"no"),
               (b"content-type", b"text/event-stream; charset=utf-8")]
    """Every stream's headers: one list for all (not two lists of tuples per open stream)."""

    def __init__(self, stream: RunStream) -> None:
        self.stream, self.status_code, self.background = stream, 200, None
        self.raw_headers = self.HEADERS

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        await send({"type": "http.response.start", "status": self.status_code, "headers": self.raw_headers})
        watcher = asyncio.create_task(self._watch(receive))
        try:
            async for chunk in self.stream.frames():
                await send({"type": "http.response.body", "body": chunk, "more_body": True})
                del chunk  # not kept while the stream waits for the next (10,000 wait at once)
            await send({"type": "http.response.body", "body": b"", "more_body": False})
        finally:
            watcher.cancel()
            self.stream.close()

    async def _watch(self, receive: Any) -> None:
        """The client left (uvicorn's send then returns silently): end the stream."""
        while (await receive())["type"] != "http.disconnect":
            pass
        self.stream.end()


def read_handler(gateway: Gateway, op: Operation) -> Callable[[Request], Awaitable[Response]]:
    async def handle(request: Request) -> Response:
        try:
            key = authenticate(gateway, request, query_ok=op.stream)
            service, actor = gateway.service, key.actor
            if op.id == "listApprovals":
                role = request.query_params.get("role")
                items = await gateway.blocking(service.approvals, actor, role)
                return JSONResponse(m.ApprovalList(approvals=items).model_dump(mode="json"))
            run_id = path_params(request)["run_id"]
            names = service.rf.names
            if op.id == "streamRunOutput":
                if not service.readable_known(actor, run_id):
                    await gateway.blocking(service.readable, actor, run_id)
                return await stream(gateway, request, run_id, names.output, decode_output, output_filter())
            if op.id == "streamRunEvents" or (op.id == "getRunView" and wants_stream(request)):
                if not service.readable_known(actor, run_id):  # a stream of a run read lately: no state read
                    await gateway.blocking(service.readable, actor, run_id)
                if op.id == "streamRunEvents":
                    return await stream(gateway, request, run_id, names.events, decode_event(gateway.codec))
                if service.view_role(actor) != "user":
                    raise ProblemError(406, "stream-not-offered", "Only the user view streams",
                                       "the operator and auditor views are computed per read",
                                       field="Accept", fix="GET it as JSON, or stream /runs/{run_id}/events")
                return await stream(gateway, request, run_id, names.user_view, decode_view)
            min_version = number(request, "min_version", int, 0, 2**62)
            wait = number(request, "wait", float, 0, gateway.service.settings.max_wait_s)
            read = service.state if op.id == "getRunState" else service.view
            found = await gateway.blocking(read, actor, run_id, min_version, wait)
            return JSONResponse(found, headers={"Runfacts-Version": str(found.get("version"))})
        except Exception as exc:  # noqa: BLE001 - every error becomes a problem document
            try:
                return problem(from_error(exc))
            except Exception:
                log.exception("%s failed", op.id)
                return problem(ProblemError(500, "internal", "The gateway failed", type(exc).__name__))

    return handle


def create_app(gateway: Gateway) -> StreamsFirst:
    """The ASGI app: every operation of OPENAPI's table, and /openapi.json."""
    spec = document()

    async def openapi(_request: Request) -> Response:
        return JSONResponse(spec)

    routes = [Route("/openapi.json", openapi, methods=["GET"])]
    for op in OPERATIONS:
        handler = write_handler(gateway, op) if op.method == "POST" else read_handler(gateway, op)
        routes.append(Route(op.path, handler, methods=[op.method], name=op.id))
    async def not_here(request: Request, exc: Exception) -> Response:
        status = exc.status_code if isinstance(exc, HTTPException) else 400
        allowed = sorted({op.method for op in OPERATIONS if re.fullmatch(re.sub(r"\{[^}]+\}", "[^/]+", op.path),
                                                                           request.url.path)})
        return problem(ProblemError(status, "no-such-route" if status == 404 else "method-not-allowed",
                                    "No such route" if status == 404 else "Method not allowed",
                                    f"{request.method} {request.url.path[:200]}", field="(path)",
                                    fix="see /openapi.json" + (f"; this path takes {', '.join(allowed)}"
                                                               if allowed else ""),
                                    headers={"Allow": ", ".join(allowed)} if status == 405 else None))

    @contextlib.asynccontextmanager
    async def lifespan(_app: Starlette) -> AsyncIterator[None]:
        yield
        gateway.close()

    app = Starlette(routes=routes, exception_handlers={HTTPException: not_here}, lifespan=lifespan)
    app.state.gateway = gateway
    return StreamsFirst(app, gateway)


class StreamsFirst:
    """The ASGI app: event-stream GETs go straight to their handler and response, the rest to
    Starlette. An open stream then holds its response's frames only, not Starlette's routing and
    exception-handling frames around it (~10 KB a stream: benchmarks/gateway_bench.py --streams)."""

    def __init__(self, app: Starlette, gateway: Gateway) -> None:
        self.app, self.state = app, app.state
        self.streams = [(re.compile(re.sub(r"\{(\w+)\}", r"(?P<\1>[^/]+)", op.path) + "$"), read_handler(gateway, op))
                        for op in OPERATIONS if op.stream]

    @property
    def routes(self) -> list[Any]:
        return self.app.routes

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http" and scope["method"] == "GET":
            for pattern, handle in self.streams:
                found = pattern.match(scope["path"])
                if found and (scope["path"].endswith(("/events", "/output")) or any(
                        name == b"accept" and b"text/event-stream" in value for name, value in scope["headers"])):
                    scope["path_params"] = found.groupdict()
                    response = await handle(Request(scope, receive))
                    await response(scope, receive, send)
                    return
        await self.app(scope, receive, send)


__all__ = ["Gateway", "GatewaySettings", "create_app"]
