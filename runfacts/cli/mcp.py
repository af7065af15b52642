"""`runfacts mcp serve`: a tool registry's tools for any MCP client, each call governed.

The command only: what a `tools/call` becomes (a run's proposed call, its approval, its
result, the MCP errors) is runfacts.mcp.server; docs/mcp.md shows the setup.
"""

from __future__ import annotations

from typing import Annotated

import typer

from runfacts.schemas.errors import ConfigError

app = typer.Typer(help="Governed MCP: serve a tool registry to MCP clients (docs/mcp.md).", no_args_is_help=True)


@app.command("serve")
def serve(
    tools: Annotated[str, typer.Option("--tools", envvar="RUNFACTS_TOOLS",
                                       help="module:registry, file.py:registry or mcp:<manifest.toml>")],
    transport: Annotated[str, typer.Option(help="stdio (one client on stdin/stdout) or http (streamable HTTP)")]
    = "stdio",
    host: Annotated[str, typer.Option(help="http: the address to listen on")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="http: the port (the endpoint is /mcp)")] = 8765,
    agent: Annotated[str, typer.Option(help="stdio: the actor (subjectId, role agent) the client proposes as")]
    = "mcp-agent",
    api_keys: Annotated[str, typer.Option("--api-keys", envvar="RUNFACTS_MCP_API_KEYS",
                                          help="http: TOML [keys] subject = \"<sha256 of the key>\"")] = "",
    user_id: Annotated[str, typer.Option(help="the runs' userId")] = "mcp-user",
    wait: Annotated[float, typer.Option(help="seconds a call waits for approval and result before "
                                             "answering 'still waiting' (-32005)")] = 600.0,
    args_store: Annotated[str, typer.Option("--args-store", envvar="RUNFACTS_ARGS_STORE",
                                            help="the argument store the dispatcher's --args-store reads")] = "",
) -> None:
    """Serve the registry's tools to MCP clients: each tools/call is a run's proposed call."""
    import anyio

    from runfacts.client import ClientSettings, Runfacts
    from runfacts.mcp.server import GovernedServer, ServeSettings, load_api_keys, serve_http, serve_stdio
    from runfacts.tools import load_registry

    if transport not in ("stdio", "http"):
        raise ConfigError("--transport", transport, "expected stdio or http")
    if transport == "http" and not api_keys:
        raise ConfigError("--api-keys", "", "http needs the API keys its clients authenticate with "
                                            "(TOML [keys] subject = \"<sha256 of the key>\")")
    registry = load_registry(tools)
    settings = ServeSettings(agent=agent, api_keys=load_api_keys(api_keys) if api_keys else {}, user_id=user_id,
                             wait_s=wait)
    rf = Runfacts.connect(args_store=args_store or None, settings=ClientSettings(component="mcp"))
    rf.learn(registry)  # proposals carry the argument display its approvers see (the tools' schemas)
    governed = GovernedServer(registry, rf, settings, http=transport == "http")
    try:
        if transport == "stdio":
            anyio.run(serve_stdio, governed)
        else:
            serve_http(governed, host, port)
    finally:
        rf.close()
