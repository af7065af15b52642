"""Tools a dispatcher serves: a registry of typed functions, their manifest, their adapters.

- `registry` — `ToolRegistry`: the `@registry.tool(...)` / `@registry.lookup(...)` decorators,
  `catalog()` (the capability manifest), `adapters()` (what the dispatcher calls). Pure.
- `spec` — one tool: its manifest, argument model and result type read from the function's
  signature, `ToolContext` / `LookupContext`. Pure.
- `errors` — `ToolError` (retryability is the error's), `OutcomeUnknown`, `RegistryError`,
  `retry_after_ms` (a 429's Retry-After header for `ToolError("rate_limited", ...)`).
- `manifest` — the catalog as the TOML `runfacts worker decider --capabilities` reads. Pure.
- `adapter` — shell: `RegisteredTool` (implements `processors.dispatcher.adapters.ToolAdapter`) and the
  `ToolRuntime` where tool code runs (thread pool, event loop).
- `control` — shell: `ToolControlBoard`, the fleet's paused capabilities read from
  `<prefix>.tools.control` (implements `processors.dispatcher.adapters.PauseBoard`), and the
  `tool.pause` / `tool.resume` commands (`runfacts tools pause|resume`).
- `loader` — `load_registry("module:attribute")` (or a source: `mcp:<manifest.toml>`,
  runfacts.mcp); `refund` — the packaged registry
  (`runfacts.tools.refund:registry`, served by default); `serve` — the manifest a dispatcher
  serving a registry works with (the factory is `runfacts.workers.dispatcher`:
  `runfacts worker dispatcher --tools module:registry`).

- `parse_capabilities` (a manifest's TOML, checked as the workers load it), `derive_compensation`
  (a compensating call's arguments from the original's display and result).
- `render`, `problems`, `asks_approval` — the argument display an approver sees of a call, what in
  it breaks the tool's schema, whether its approval rule asks (from processors.policy.display).

Pure: registry, spec, errors, manifest. Shells: adapter (runs tool code), control (reads the control topic),
loader
(imports the user's module), serve (reads the decider's manifest file).
This room may import processors, connectors and schemas; nothing there imports it.
"""

from runfacts.processors.policy.capabilities import parse_capabilities
from runfacts.processors.policy.compensation import derive as derive_compensation
from runfacts.processors.policy.display import asks_approval, problems, render
from runfacts.tools.adapter import RegisteredTool, ToolRuntime
from runfacts.tools.errors import OutcomeUnknown, RegistryError, ToolError, retry_after_ms
from runfacts.tools.loader import DEFAULT_TOOLS, load_registry
from runfacts.tools.manifest import manifest_toml
from runfacts.tools.registry import RETRY_CLASSES, ToolRegistry
from runfacts.tools.spec import LookupContext, ToolContext, ToolSpec

__all__ = [
    "DEFAULT_TOOLS",
    "RETRY_CLASSES",
    "LookupContext",
    "OutcomeUnknown",
    "RegisteredTool",
    "RegistryError",
    "ToolContext",
    "ToolError",
    "ToolRegistry",
    "ToolRuntime",
    "ToolSpec",
    "asks_approval",
    "derive_compensation",
    "load_registry",
    "manifest_toml",
    "parse_capabilities",
    "problems",
    "render",
    "retry_after_ms",
]
