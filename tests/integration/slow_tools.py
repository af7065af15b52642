"""Tools for test_tools_slow.py: a sync call that outlives the transaction timeout, a quick async one."""

from __future__ import annotations

import asyncio
import time

from runfacts.tools import ToolContext, ToolRegistry

registry = ToolRegistry("slow")


@registry.tool("slow.report", risk="low", retry="none", timeout_s=60)
def slow_report(seconds: float, ctx: ToolContext) -> dict[str, object]:
    started = time.time()
    time.sleep(seconds)
    return {"slept": seconds, "started": started, "finished": time.time(), "attempt": ctx.attempt}


@registry.tool("quick.echo", risk="low", retry="none")
async def quick_echo(text: str) -> dict[str, object]:
    await asyncio.sleep(0)
    return {"echo": text, "finished": time.time()}
