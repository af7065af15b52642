"""A downstream MCP server's tools served as runfacts capabilities (shell: talks to the server).

`mcp_registry("ledger.mcp.toml")` (or `runfacts worker dispatcher --tools mcp:ledger.mcp.toml`)
lists the server's tools once and returns an `McpRegistry`: a `ToolRegistry` whose entries are
`McpTool` adapters, one capability `<name>.<tool>` per governed tool, its manifest from the
operator's rules (runfacts.mcp.manifest), its argument schema the tool's `inputSchema`.

How a call ends (`McpTool.execute`):
- arguments that do not fit the input schema -> `failed(validation)` naming each field, not sent;
- the session cannot be opened -> `failed(transient, retryable)`: nothing was sent;
- a result -> `completed` with its value (runfacts.mcp.results.value_of);
- `isError: true` -> `failed(refused)` with the tool's text (a declared failure, not retried);
- a JSON-RPC error for the request (invalid params, unknown tool) -> `failed(validation)`;
- sent and no answer (timeout, the server died, any other transport error) -> `result_unknown`,
  reconciled by the manifest's `lookup` tool; a read-only tool is instead retried (`transient`),
  as re-running it cannot duplicate anything.
The call's `_meta` carries `io.runfacts/idempotencyKey` (the same for every attempt: the server
dedupes on it), `io.runfacts/externalRequestId` (what the lookup is asked about),
`io.runfacts/toolCallId`, `io.runfacts/attempt`, `io.runfacts/leaseEpoch`.
"""

from __future__ import annotations

import hashlib
import json
import threading
from collections import OrderedDict
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from mcp import MCPError
from mcp.types import Tool

from runfacts.mcp.connection import Lost, McpConnection, NotSent
from runfacts.mcp.manifest import McpManifest, ToolRule, parse_manifest
from runfacts.mcp.results import error_text, lookup_value, meta_of, schema_errors, value_of
from runfacts.processors.dispatcher.adapters import (
    FoundCompleted,
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
from runfacts.processors.policy.capabilities import CapabilityManifest, Risk
from runfacts.processors.policy.retry import ErrorClass, canonical_json
from runfacts.schemas.errors import ConfigError
from runfacts.tools import RETRY_CLASSES, ToolRegistry

DETAIL_CHARS = 400
REMEMBERED = 10_000


def load_manifest(path: str | Path) -> McpManifest:
    """`parse_manifest` of a file; a relative `cwd` (or none) is the file's folder."""
    file = Path(path)
    if not file.is_file():
        raise ConfigError("mcp manifest", str(path), "no such file: give the path of the operator's "
                                                     "<name>.mcp.toml (see docs/mcp.md)")
    manifest = parse_manifest(file.read_text(encoding="utf-8"), str(path))
    base = file.resolve().parent
    cwd = base if manifest.cwd is None else (base / manifest.cwd)
    return manifest.model_copy(update={"cwd": str(cwd)})


class McpRegistry(ToolRegistry):
    """A ToolRegistry of one MCP server's governed tools, with their input schemas."""

    def __init__(self, manifest: McpManifest, connection: McpConnection) -> None:
        super().__init__(f"mcp:{manifest.name}")
        self.manifest = manifest
        self.connection = connection
        self.tools: dict[str, McpTool] = {}  # by capability id

    def input_schema(self, capability_id: str) -> dict[str, Any]:
        return self.tools[capability_id].schema

    def description(self, capability_id: str) -> str:
        return self.tools[capability_id].description


def mcp_registry(path: str | Path) -> McpRegistry:
    """The governed tools of the server the manifest at `path` names (lists them once)."""
    manifest = load_manifest(path)
    connection = McpConnection(manifest)
    try:
        listed = {tool.name: tool for tool in connection.list_tools()}
    except NotSent as exc:
        connection.close()
        raise ConfigError("mcp manifest", str(path), f"{exc}: start the server or fix command/url") from None
    except BaseException:
        connection.close()
        raise
    connection.release()  # the workers open their session on first use
    wanted = sorted(listed) if manifest.serve == "all" else sorted(manifest.tool)
    missing = [name for name in wanted if name not in listed]
    if missing:
        connection.close()
        raise ConfigError("mcp manifest", str(path), f"server {manifest.name} lists no tool "
                                                     f"{', '.join(missing)} (it lists: {', '.join(sorted(listed))})")
    registry = McpRegistry(manifest, connection)
    for name in wanted:
        rule = manifest.rule(name)
        if rule.lookup is not None and rule.lookup not in listed:
            connection.close()
            raise ConfigError("mcp manifest", str(path), f"tool.{name}.lookup = {rule.lookup!r}: server "
                                                         f"{manifest.name} lists no such tool")
        tool = McpTool(manifest, connection, listed[name], rule)
        registry.tools[tool.capability_id] = tool
        registry.adapter(tool.capability, tool.served)
    return registry


def registry_from_manifest(argument: str) -> McpRegistry:
    """The `--tools mcp:<manifest.toml>` source (runfacts.tools.loader.SOURCES)."""
    return mcp_registry(argument)


class McpTool:
    """`ToolAdapter` for one tool of a downstream MCP server (see the module docstring)."""

    def __init__(self, manifest: McpManifest, connection: McpConnection, tool: Tool, rule: ToolRule) -> None:
        self.name = tool.name
        self.description = tool.description or ""
        self.schema: dict[str, Any] = dict(tool.input_schema)
        self.rule = rule
        self.connection = connection
        self.capability_id = manifest.capability_id(tool.name)
        try:
            self.capability = CapabilityManifest(
                capability_id=self.capability_id, risk=Risk(rule.effective_risk),
                needs_approval=rule.effective_needs_approval, required_role=rule.required_role,
                retry=RETRY_CLASSES[rule.retry],
                reconciliation_deadline_ms=rule.reconcile_within_ms, approval_ttl_ms=rule.approval_ttl_ms,
                self_approval=rule.self_approval, read_only=rule.read_only, has_lookup=rule.lookup is not None,
                # the approver sees the arguments by the tool's inputSchema; the decider validates them
                argument_schema=json.dumps(self.schema, separators=(",", ":")))
        except ValueError as exc:
            raise ConfigError("mcp manifest", f"tool.{tool.name}", f"bad rule: {exc}") from None
        self._done: OrderedDict[str, FoundCompleted] = OrderedDict()
        self._lock = threading.Lock()

    def served(self, _options: Mapping[str, str]) -> McpTool:
        """The registry's adapter factory: this tool, whatever the serve options."""
        return self

    def validate(self, arguments: Mapping[str, Any]) -> list[str]:
        """Each way `arguments` break the tool's input schema (empty: they fit)."""
        return schema_errors(self.schema, arguments)

    def execute(self, request: ToolRequest) -> ToolOutcome:
        errors = self.validate(request.arguments)
        if errors:
            return ToolFailed.of(ErrorClass.VALIDATION, "invalid_arguments",
                                 detail=f"tool {self.capability_id}: arguments do not fit its inputSchema: "
                                        f"{'; '.join(errors)}"[:DETAIL_CHARS])
        meta = meta_of(request.idempotency_key, request.external_request_id, request.tool_call_id,
                       request.attempt, request.lease_epoch)
        try:
            result = self.connection.call(self.name, request.arguments, meta, self.rule.timeout_s)
        except NotSent as exc:
            return ToolFailed.of(ErrorClass.TRANSIENT, "not_sent", detail=str(exc)[:DETAIL_CHARS])
        except Lost as exc:
            if self.rule.read_only:
                return ToolFailed.of(ErrorClass.TRANSIENT, "answer_lost", detail=f"read-only: {exc}"[:DETAIL_CHARS])
            return ToolUnknown(reason=str(exc)[:DETAIL_CHARS])
        except MCPError as exc:
            detail = f"tool {self.capability_id}: the server refused the request: {exc}"
            return ToolFailed.of(ErrorClass.VALIDATION, f"mcp_{-exc.code}", detail=detail[:DETAIL_CHARS])
        except Exception as exc:  # noqa: BLE001 - the adapter never raises into the dispatcher
            return ToolUnknown(reason=f"tool {self.capability_id}: {type(exc).__name__}: {exc}"[:DETAIL_CHARS])
        if result.is_error:
            return ToolFailed.of(ErrorClass.REFUSED, "tool_error",
                                 detail=f"tool {self.capability_id}: {error_text(result)}"[:DETAIL_CHARS])
        found = self._found(request.external_request_id, value_of(result))
        with self._lock:
            self._done[request.external_request_id] = found
            while len(self._done) > REMEMBERED:
                self._done.popitem(last=False)
        return ToolCompleted(result_ref=found.result_ref, result_hash=found.result_hash, provider_status="completed",
                             verification=found.verification, result=found.result)

    def _found(self, request_id: str, value: Any) -> FoundCompleted:
        result = None if value is None else canonical_json(value).decode()
        digest = hashlib.sha256(canonical_json({"externalRequestId": request_id, "result": result})).hexdigest()
        return FoundCompleted(result_ref=f"{self.capability_id}:{request_id}", result_hash=digest,
                              provider_status="completed", verification=Verification.CONFIRMED_SUCCESS, result=result)

    def lookup(self, external_request_id: str) -> LookupOutcome:
        """What this process saw, else the manifest's lookup tool: found, not found, or unknown."""
        with self._lock:
            known = self._done.get(external_request_id)
        if known is not None:
            return known
        if self.rule.lookup is None:
            return LookupUnknown(reason=f"tool {self.capability_id} has no lookup and this dispatcher did not see "
                                        f"{external_request_id}: name one in the manifest (tool.{self.name}.lookup)",
                                 retryable=False)
        try:
            result = self.connection.call(self.rule.lookup, {self.rule.lookup_argument: external_request_id}, {},
                                          self.rule.timeout_s)
        except (NotSent, Lost, MCPError) as exc:
            return LookupUnknown(reason=f"lookup {self.rule.lookup} of {self.capability_id}: {exc}"[:DETAIL_CHARS],
                                 retryable=True)
        if result.is_error:
            return LookupUnknown(reason=f"lookup {self.rule.lookup}: {error_text(result)}"[:DETAIL_CHARS],
                                 retryable=True)
        value = lookup_value(result)
        if value is None:
            return NotFound()
        return self._found(external_request_id, value)

    def cancel(self, external_request_id: str) -> bool:
        """MCP has no cancel of an effect: the dispatcher then looks the request up."""
        return False
