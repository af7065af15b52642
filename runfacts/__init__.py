"""runfacts: durable, replayable, auditable facts for AI-agent runs, on Kafka.

What you import (the public API; docs/architecture.md, "Public API"):

- `runfacts.client` — `Runfacts`, `Run`, `ToolCall`, approvals: what an agent service and a UI
  backend are written against.
- `runfacts.tools` — `ToolRegistry` and `@registry.tool(...)`: the tools a dispatcher serves.
- `runfacts.integrations.pydantic_ai|langgraph|openai_agents` — the agent-framework bridges.
- `runfacts.testing` — `TestStack`: the real decider and dispatcher without a broker.
- `runfacts.processors.engine` — `Application`, `Engine`, `TestDriver`: for stream authors.
- `runfacts.schemas` (`events`, `commands`, `common`, `codec`) — the wire contract, for readers
  of the log; `runfacts.schemas.errors` — `RunfactsError`, the root of every runfacts error.

The HTTP gateway (`runfacts gateway serve`), the MCP server (`runfacts mcp serve`), the workers,
the console and the operator commands are used through the `runfacts` command, not imported.

Foundation modules. Pure: ids (run ids, the contract's limits), partitioning (murmur2), metrics
(the engines' metrics record).

Everything else is internal: importable, but it may change without notice. The foundation
(settings, topics, partitioning, ids, crashpoints, telemetry, otel, logread, privacy), the
processors, projections and connectors, ops/, security/, dashboard/, gateway/, mcp/, demo/,
dev/ (fenced: nothing shipped imports it) and cli/. `tests/unit/house/test_public_api.py` holds the
rule that README, docs/ and examples/ import only names of `PUBLIC_MODULES` doorways.
"""

from __future__ import annotations

from runfacts.doorway import lazy_modules

__version__ = "0.1.0"

# the doorways a user imports from (each names its public names in `__all__`)
PUBLIC_MODULES = (
    "runfacts.client",
    "runfacts.tools",
    "runfacts.integrations",
    "runfacts.integrations.langgraph",
    "runfacts.integrations.openai_agents",
    "runfacts.integrations.pydantic_ai",
    "runfacts.testing",
    "runfacts.processors.engine",
    "runfacts.schemas",
    "runfacts.schemas.codec",
    "runfacts.schemas.commands",
    "runfacts.schemas.common",
    "runfacts.schemas.errors",
    "runfacts.schemas.events",
)

# the public rooms, imported on first use (`runfacts.client`)
__all__ = [
    "PUBLIC_MODULES",
    "client",
    "integrations",
    "testing",
    "tools",
]


__getattr__ = lazy_modules(__name__, ["client", "integrations", "testing", "tools"])
