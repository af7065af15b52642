"""The tools `step_latency.py` serves: instant answers, so the step's latency is the log's and
the processors', not a tool's. `bench.echo` needs no approval; `bench.approve` needs a
support agent's (the benchmark's automatic approver gives it). Both are `idempotent` (true:
they change nothing), so the decider may dispatch them with their authorization (ADR 0011: a
tool without a lookup that is neither read-only nor idempotent keeps the claim round trip)."""

from __future__ import annotations

from runfacts.tools import ToolContext, ToolRegistry

registry = ToolRegistry("step-bench")


@registry.tool("bench.echo", risk="low", retry="none", idempotent=True)
def echo(n: int, ctx: ToolContext) -> dict[str, int]:
    """Returns its argument at once."""
    return {"n": n}


@registry.tool("bench.approve", risk="high", needs_approval=True, required_role="support_agent", retry="none",
               approval_ttl_ms=600_000, idempotent=True)
def approved(n: int, ctx: ToolContext) -> dict[str, int]:
    """Returns its argument at once, after a person approved the call."""
    return {"n": n}
