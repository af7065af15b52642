"""Governed MCP: MCP servers' tools behind runfacts approvals, and runfacts tools for MCP clients.

- `manifest` — the operator's `<name>.mcp.toml`: which tools of a downstream server are served,
  their risk, approval, retry, read-only flag and reconciliation lookup tool. Pure.
- `results` — what a `tools/call` answer means (value, `isError`, a lookup's "not found"), the
  `_meta` keys a governed call carries, arguments checked against an `inputSchema`. Pure.
- `connection` — shell: one client session to a downstream server (stdio or streamable HTTP)
  on its own event-loop thread; tells "never sent" from "sent, answer lost".
- `downstream` — shell: `load_manifest(path)`, `mcp_registry(path)` (`--tools mcp:<manifest.toml>`), the server's tools
  as `McpTool` adapters of a `ToolRegistry` the dispatcher serves and the decider reads.
- `server` — shell: `runfacts mcp serve`: a registry's tools for any MCP client, each
  `tools/call` a proposed call of a run through `runfacts.client`.

Pure: manifest, results. Shells: connection, downstream, server.
Uses the official `mcp` SDK (the optional extra `runfacts[mcp]`). This room may import
processors, connectors, tools and the client; only the CLI imports it.
"""

from runfacts.mcp.downstream import McpRegistry, McpTool, load_manifest, mcp_registry
from runfacts.mcp.manifest import McpManifest, ToolRule, parse_manifest
from runfacts.mcp.results import META_IDEMPOTENCY_KEY, META_REQUEST_ID

__all__ = [
    "META_IDEMPOTENCY_KEY",
    "META_REQUEST_ID",
    "McpManifest",
    "McpRegistry",
    "McpTool",
    "ToolRule",
    "load_manifest",
    "mcp_registry",
    "parse_manifest",
]
