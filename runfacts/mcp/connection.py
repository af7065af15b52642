"""One long-lived MCP client session to a downstream server, usable from sync code (shell).

The session lives on its own event-loop thread; `call` and `list_tools` block the caller.
A broken session (the server died, the stream closed) is replaced on the next call, so a
restarted stdio server is spawned again. What matters for governance is WHEN a call failed:
- `NotSent`: the session could not be opened: the request never left this process;
- `Lost`: it was sent and no answer came (transport closed, timeout): it may have executed;
- `mcp.MCPError` with a request-level code: the server answered the request with an error.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
from collections.abc import Coroutine
from typing import Any, TypeVar

from mcp import Client, MCPError, StdioServerParameters
from mcp.types import CallToolResult, Tool

from runfacts.mcp.manifest import McpManifest
from runfacts.schemas.errors import RunfactsError

log = logging.getLogger("runfacts.mcp")
T = TypeVar("T")
# JSON-RPC codes that mean "the server refused the request" (it did not run the tool)
REFUSED_CODES = {-32600, -32601, -32602}  # invalid request, method not found, invalid params


class NotSent(RunfactsError):
    """The request never reached the server (the session could not be opened)."""


class Lost(RunfactsError):
    """The request was sent and no answer came: the tool may have acted."""


class McpConnection:
    """A client session to the manifest's server on a private event-loop thread."""

    def __init__(self, manifest: McpManifest) -> None:
        self.manifest = manifest
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name=f"runfacts-mcp-{manifest.name}",
                                        daemon=True)
        self._thread.start()
        self._client: Client | None = None
        self._stop: asyncio.Event | None = None
        self._holder: asyncio.Task[None] | None = None
        self._opening = asyncio.Lock()
        self._closed = False

    # --- sync API ------------------------------------------------------------------------

    def list_tools(self) -> list[Tool]:
        """Every tool the server lists (all pages)."""
        return self._run(self._list_tools(), self.manifest.connect_timeout_s * 2)

    def call(self, name: str, arguments: dict[str, Any], meta: dict[str, Any], timeout_s: float) -> CallToolResult:
        """`tools/call`; raises NotSent, Lost or the server's MCPError (see the module doc)."""
        return self._run(self._call(name, arguments, meta, timeout_s), timeout_s + self.manifest.connect_timeout_s + 5)

    def release(self) -> None:
        """Close the session (the next call opens a new one): an idle stdio server is not kept."""
        self._run(self._close(), 15)

    def close(self) -> None:
        """End the session and the loop thread (once; later calls do nothing)."""
        if self._closed:
            return
        self._closed = True
        if self._thread.is_alive():
            try:
                asyncio.run_coroutine_threadsafe(self._close(), self._loop).result(timeout=10)
            except Exception:  # noqa: BLE001 - closing a broken session
                log.debug("closing the MCP session of %s failed", self.manifest.name, exc_info=True)
            self._loop.call_soon_threadsafe(self._loop.stop)

    def _run(self, coro: Coroutine[Any, Any, T], timeout_s: float) -> T:
        if self._closed:
            coro.close()
            raise NotSent(f"MCP server {self.manifest.name}: the connection is closed")
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(timeout=timeout_s)

    # --- on the loop ---------------------------------------------------------------------

    async def _list_tools(self) -> list[Tool]:
        client = await self._session()
        tools: list[Tool] = []
        cursor: str | None = None
        while True:
            page = await client.list_tools(cursor=cursor) if cursor else await client.list_tools()
            tools += page.tools
            cursor = page.next_cursor
            if not cursor:
                return tools

    async def _call(self, name: str, arguments: dict[str, Any], meta: dict[str, Any],
                    timeout_s: float) -> CallToolResult:
        client = await self._session()
        try:
            return await asyncio.wait_for(client.call_tool(name, arguments, meta=meta), timeout_s)  # type: ignore[arg-type]
        except TimeoutError:
            raise Lost(f"MCP server {self.manifest.name}: no answer to {name} within {timeout_s:g} s") from None
        except MCPError as exc:
            if exc.code in REFUSED_CODES:
                raise
            await self._drop()
            raise Lost(f"MCP server {self.manifest.name}: {name} ended without an answer: {exc}") from exc
        except Exception as exc:  # noqa: BLE001 - a broken transport after sending
            await self._drop()
            raise Lost(f"MCP server {self.manifest.name}: {name} ended without an answer: "
                       f"{type(exc).__name__}: {exc}") from exc

    async def _session(self) -> Client:
        async with self._opening:
            if self._client is not None and self._holder is not None and not self._holder.done():
                return self._client
            ready: asyncio.Future[Client] = self._loop.create_future()
            self._stop = asyncio.Event()
            self._holder = self._loop.create_task(self._hold(ready, self._stop))
            try:
                self._client = await asyncio.wait_for(asyncio.shield(ready), self.manifest.connect_timeout_s)
            except BaseException as exc:  # noqa: BLE001 - every way of not opening is NotSent
                self._stop.set()
                raise NotSent(f"MCP server {self.manifest.name}: cannot open a session "
                              f"({self._target()}): {type(exc).__name__}: {exc}") from None
            return self._client

    async def _hold(self, ready: asyncio.Future[Client], stop: asyncio.Event) -> None:
        """Open the session, publish it, keep it open until told to stop (or it breaks)."""
        try:
            async with self._client_of() as client:
                ready.set_result(client)
                await stop.wait()
        except BaseException as exc:  # noqa: BLE001 - reported through `ready`, or logged
            if not ready.done():
                ready.set_exception(exc)
            else:
                log.warning("MCP session to %s ended: %s: %s", self.manifest.name, type(exc).__name__, exc)
        finally:
            self._client = None

    async def _drop(self) -> None:
        if self._stop is not None:
            self._stop.set()
        self._client = None

    async def _close(self) -> None:
        await self._drop()
        if self._holder is not None:
            with contextlib.suppress(Exception):  # a session that broke on its own
                await asyncio.wait_for(self._holder, 5)

    def _client_of(self) -> Client:
        m = self.manifest
        if m.command is not None:
            params = StdioServerParameters(command=m.command[0], args=list(m.command[1:]), env=m.env or None,
                                           cwd=m.cwd)
            return Client(params, cache=None)
        assert m.url is not None
        if not m.headers:
            return Client(m.url, cache=None)
        import httpx2
        from mcp.client.streamable_http import streamable_http_client

        return Client(streamable_http_client(m.url, http_client=httpx2.AsyncClient(headers=m.headers)),  # type: ignore[arg-type]
                      cache=None)

    def _target(self) -> str:
        m = self.manifest
        return f"stdio: {' '.join(m.command)}" if m.command is not None else f"url: {m.url}"
