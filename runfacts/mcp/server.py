"""runfacts as an MCP server: a tool registry's tools for any MCP client (shell).

`runfacts mcp serve --tools module:registry` (or `--tools mcp:<manifest.toml>`: a downstream
server's tools, governed) lists every capability of the registry as an MCP tool (its argument
schema as `inputSchema`). Each `tools/call`:
1. is checked against the tool's argument schema (a JSON-RPC invalid-params error naming each
   field; nothing is proposed);
2. becomes ONE RUN with one proposed call, through `runfacts.client`, by the actor the MCP
   client authenticated as (stdio: the configured `--agent`; HTTP: the subject of its API key);
3. waits for the decision and the result, sending `notifications/progress` (when the client
   gave a progress token) with what it waits for ("waiting for approval ap-...");
4. returns the tool's value (`structuredContent`, and the same JSON as text), an `isError`
   result when the tool failed, or a JSON-RPC error for what is not the tool's answer:
   rejected -32001, approval expired or invalidated -32002, needs_review -32003, run
   cancelled or ended -32004, still waiting after `--wait` -32005, refused by policy -32006.

One run per call, keyed by the client's `_meta["io.runfacts/idempotencyKey"]`: the run id
is derived from (actor, key), the call id from (tool, arguments), so a client that sends the
same call again (a retry after a timeout or a reconnect, in this or another server process)
re-attaches to the same call and gets its outcome: never a second execution. The same key
with other arguments is refused (-32602). A call without a key is a new run every time. The
run is completed once its call ended, any way but "still waiting" (the call stays live).
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import json
import logging
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import anyio
from mcp import MCPError
from mcp.server import Server, ServerRequestContext
from mcp.types import CallToolRequestParams, CallToolResult, ListToolsResult, PaginatedRequestParams, TextContent, Tool

from runfacts.client import (
    ApprovalExpired,
    ApprovalInvalidated,
    ApprovalRejected,
    ClientError,
    CommandRejected,
    RunCancelled,
    RunEnded,
    Runfacts,
    RunNeedsReview,
    ToolCall,
    ToolFailed,
    WaitTimeout,
)
from runfacts.client.run import Run, args_hash, sha256
from runfacts.mcp.downstream import McpRegistry
from runfacts.mcp.results import META_IDEMPOTENCY_KEY, schema_errors
from runfacts.schemas.common import Actor
from runfacts.schemas.errors import ConfigError
from runfacts.tools import RegistryError, ToolRegistry

log = logging.getLogger("runfacts.mcp")

INVALID_PARAMS = -32602
REJECTED, EXPIRED, NEEDS_REVIEW, ENDED, STILL_WAITING, REFUSED = -32001, -32002, -32003, -32004, -32005, -32006
META_RUN_ID = "io.runfacts/runId"
META_TOOL_CALL_ID = "io.runfacts/toolCallId"


@dataclass(frozen=True)
class ServeSettings:
    """Who the MCP clients are and how long a call waits."""

    agent: str = "mcp-agent"
    """The actor of a stdio client (subjectId; role agent)."""
    api_keys: Mapping[str, str] = field(default_factory=dict)
    """HTTP: sha256 hex of an API key -> the subject it authenticates (`Authorization: Bearer <key>`
    or `X-API-Key: <key>`); a request without a known key is refused."""
    user_id: str = "mcp-user"
    """The runs' userId."""
    wait_s: float = 600.0
    progress_every_s: float = 2.0


class GovernedServer:
    """The MCP server's handlers over one registry and one runfacts client."""

    def __init__(self, registry: ToolRegistry, rf: Runfacts, settings: ServeSettings, http: bool = False) -> None:
        self.registry, self.rf, self.settings, self.http = registry, rf, settings, http
        self.catalog = registry.catalog().capabilities
        self.tools = [Tool(name=cid, description=self._description(cid), input_schema=self._schema(cid))
                      for cid in self.catalog]

    def server(self) -> Server[Any]:
        """The SDK's low-level server with this registry's tools."""
        return Server(f"runfacts-{self.registry.name}", on_list_tools=self.list_tools, on_call_tool=self.call_tool)

    # --- the handlers ----------------------------------------------------------------------

    async def list_tools(self, _ctx: ServerRequestContext[Any], _params: PaginatedRequestParams | None
                         ) -> ListToolsResult:
        return ListToolsResult(tools=self.tools)

    async def call_tool(self, ctx: ServerRequestContext[Any], params: CallToolRequestParams) -> CallToolResult:
        cid, arguments = params.name, dict(params.arguments or {})
        if cid not in self.catalog:
            raise MCPError(INVALID_PARAMS, f"unknown tool {cid!r}: this server serves {', '.join(self.catalog)}")
        errors = self._errors(cid, arguments)
        if errors:
            raise MCPError(INVALID_PARAMS, f"tool {cid}: arguments do not fit its inputSchema: {'; '.join(errors)}",
                           {"fields": errors})
        actor = self._actor(ctx)
        meta = dict(ctx.meta or {})
        key = meta.get(META_IDEMPOTENCY_KEY)
        run_id = (f"mcp-{sha256(f'{actor.subjectId}|{key}')[:32]}" if isinstance(key, str) and key
                  else f"mcp-{uuid.uuid4().hex}")
        call = await anyio.to_thread.run_sync(self._propose, run_id, cid, arguments, actor)
        token = meta.get("progressToken", meta.get("progress_token"))
        try:
            value = await self._wait(ctx, call, token)
        except ToolFailed as exc:
            await anyio.to_thread.run_sync(self._end, call.run)
            return CallToolResult(content=[TextContent(type="text", text=str(exc))], is_error=True,
                                  _meta=self._ids(call))
        except WaitTimeout as exc:  # the call is still live: the run stays open for a retry
            raise self._error(exc, call) from None
        except ClientError as exc:
            await anyio.to_thread.run_sync(self._end, call.run)
            raise self._error(exc, call) from None
        await anyio.to_thread.run_sync(self._end, call.run)
        structured = value if isinstance(value, dict) else {"result": value}
        return CallToolResult(content=[TextContent(type="text", text=json.dumps(value, sort_keys=True))],
                              structured_content=structured, _meta=self._ids(call))

    # --- a call as a run -------------------------------------------------------------------

    def _propose(self, run_id: str, cid: str, arguments: dict[str, Any], actor: Actor) -> ToolCall:
        """The call of this (actor, key): proposed now, or the one proposed before (a retry)."""
        try:
            run = self.rf.start_run(goal=f"mcp:{cid}", summary=f"MCP tools/call {cid}", user_id=self.settings.user_id,
                                    run_id=run_id, actor=actor)
        except CommandRejected as exc:
            raise _refused(exc) from None
        digest = args_hash(arguments)
        call_id = f"call-{sha256(f'{cid}|{digest}')[:20]}"
        proposed = {e.tool_call_id for e in run.journal.entries
                    if e.event_type == "tool.call.proposed" and e.tool_call_id is not None}
        if call_id in proposed:
            return ToolCall(run, call_id, cid, digest, None)  # a retry: the same call, never a second
        if proposed:
            raise MCPError(INVALID_PARAMS, f"idempotency key of run {run_id} was used for another call "
                                           f"({', '.join(sorted(proposed))}) with other arguments: use a new key")
        try:
            return run.propose(cid, arguments, target=cid, tool_call_id=call_id,
                               risk=str(self.catalog[cid].risk), summary=f"{cid} (MCP)", actor=actor)
        except CommandRejected as exc:
            raise _refused(exc) from None

    async def _wait(self, ctx: ServerRequestContext[Any], call: ToolCall, token: Any) -> Any:
        task = asyncio.ensure_future(call.result_async(timeout=self.settings.wait_s))
        tick = 0
        while True:
            if token is not None:
                # related to this request: it rides the request's stream (its SSE stream on HTTP)
                related = None if ctx.request_id is None else str(ctx.request_id)
                await ctx.session.send_progress_notification(token, tick, None, _status(call),
                                                             related_request_id=related)
            done, _ = await asyncio.wait({task}, timeout=self.settings.progress_every_s)
            if done:
                return task.result()
            tick += 1

    def _end(self, run: Run) -> None:
        try:
            run.complete()
        except ClientError as exc:  # a retry of an ended run, or the run ended otherwise
            log.debug("run %s not completed: %s", run.id, exc)

    # --- identity, schemas, errors ----------------------------------------------------------

    def _actor(self, ctx: ServerRequestContext[Any]) -> Actor:
        source = self.rf.actor.authSource
        if not self.http:
            return Actor(subjectId=self.settings.agent, roles=("agent",), authSource=source)
        headers = getattr(ctx.request, "headers", None) or {}
        given = headers.get("x-api-key") or headers.get("authorization", "").removeprefix("Bearer ").strip()
        digest = hashlib.sha256(given.encode()).hexdigest() if given else ""
        for known, subject in self.settings.api_keys.items():
            if given and hmac.compare_digest(known, digest):
                return Actor(subjectId=subject, roles=("agent",), authSource=source)
        raise MCPError(REFUSED, "no known API key: send `Authorization: Bearer <key>` (or X-API-Key) with a key "
                                "listed in the server's --api-keys file")

    def _schema(self, cid: str) -> dict[str, Any]:
        if isinstance(self.registry, McpRegistry):
            return self.registry.input_schema(cid)
        try:
            return self.registry.spec(cid).args_model.model_json_schema()
        except RegistryError:
            return {"type": "object"}  # a ready-made adapter: its arguments are its own business

    def _description(self, cid: str) -> str:
        manifest = self.catalog[cid]
        own = self.registry.description(cid) if isinstance(self.registry, McpRegistry) else ""
        if not own:
            try:
                own = (self.registry.spec(cid).function.__doc__ or "").strip()
            except RegistryError:
                own = ""
        approval = f"needs approval by {manifest.required_role}" if manifest.needs_approval else "no approval"
        return f"{own} [runfacts: risk {manifest.risk}, {approval}]".strip()

    def _errors(self, cid: str, arguments: dict[str, Any]) -> list[str]:
        if isinstance(self.registry, McpRegistry):
            return schema_errors(self.registry.input_schema(cid), arguments)
        try:
            spec = self.registry.spec(cid)
        except RegistryError:
            return []
        try:
            spec.arguments(arguments)
        except ValueError as exc:
            return [str(exc)]
        return []

    def _ids(self, call: ToolCall) -> dict[str, Any]:
        return {META_RUN_ID: call.run.id, META_TOOL_CALL_ID: call.id}

    def _error(self, exc: ClientError, call: ToolCall) -> MCPError:
        code = {ApprovalRejected: REJECTED, ApprovalExpired: EXPIRED, ApprovalInvalidated: EXPIRED,
                RunNeedsReview: NEEDS_REVIEW, RunCancelled: ENDED, RunEnded: ENDED,
                WaitTimeout: STILL_WAITING}.get(type(exc), REFUSED)
        hint = " (send the same call with the same idempotency key to keep waiting)" if code == STILL_WAITING else ""
        return MCPError(code, f"{type(exc).__name__}: {exc}{hint}", {**self._ids(call), "outcome": type(exc).__name__})


def _refused(exc: CommandRejected) -> MCPError:
    return MCPError(REFUSED, f"refused by runfacts: {exc}", {"reason": exc.reason, "runId": exc.run_id})


def _status(call: ToolCall) -> str:
    types = {e.event_type for e in call.run.journal.entries if e.tool_call_id == call.id}
    if "tool.call.result_unknown" in types:
        return f"call {call.id}: the answer was lost; reconciling"
    if "tool.call.authorized" in types:
        return f"call {call.id}: authorized; the tool is running"
    if "approval.required" in types:
        return f"call {call.id}: waiting for approval {call.approval_id} (run {call.run.id})"
    return f"call {call.id}: proposed in run {call.run.id}; waiting for the decider"


def load_api_keys(path: str) -> dict[str, str]:
    """`--api-keys FILE`: TOML `[keys]` of `subject = "<sha256 hex of the key>"` -> {hash: subject}."""
    import tomllib
    from pathlib import Path

    try:
        data = tomllib.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise ConfigError("--api-keys", path, f"cannot read it: {exc}") from None
    keys = data.get("keys")
    if not isinstance(keys, dict) or not keys:
        raise ConfigError("--api-keys", path, 'expected a [keys] table of subject = "<sha256 hex of the key>"')
    out = {}
    for subject, digest in keys.items():
        if not (isinstance(digest, str) and len(digest) == 64 and all(c in "0123456789abcdef" for c in digest)):
            raise ConfigError("--api-keys", path, f"keys.{subject}: expected the key's sha256 as 64 lowercase hex "
                                                  "digits (`printf %s KEY | sha256sum`)")
        out[digest] = subject
    return out


async def serve_stdio(governed: GovernedServer) -> None:
    """Serve one MCP client over this process's stdin/stdout until it closes."""
    from mcp.server.stdio import stdio_server

    server = governed.server()
    async with stdio_server() as (read, write):
        await server.run(read, write, server.create_initialization_options())


def serve_http(governed: GovernedServer, host: str, port: int) -> None:
    """Serve MCP clients over streamable HTTP at http://host:port/mcp (blocking)."""
    import uvicorn

    app = governed.server().streamable_http_app(host=host)
    uvicorn.run(app, host=host, port=port, log_level="warning")
