"""The downstream MCP server of benchmarks/mcp_overhead.py: one read-only tool that answers at once
(the official SDK's MCPServer over stdio)."""

from __future__ import annotations

from mcp.server.mcpserver import MCPServer

app = MCPServer("bench")


@app.tool()
def echo(text: str) -> dict[str, str]:
    """Return the text (read-only, instant)."""
    return {"text": text}


if __name__ == "__main__":
    app.run()
