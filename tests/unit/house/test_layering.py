"""One direction between the rooms (LAYOUT rules 3, 4 and 6), read off the `ast` import graph.

Every import in the product, lazy ones inside functions included, must follow ALLOWED:
schemas <- foundation <- processors <- projections, connectors <- tools <- services, workers <- cli,
and among the services: security <- client <- integrations, ops, gateway <- dashboard.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]
ROOTS = {"runfacts": "runfacts", "schemas": "runfacts.schemas", "processors": "runfacts.processors",
         "projections": "runfacts.projections", "connectors": "runfacts.connectors"}
SERVICES = ("client", "integrations", "ops", "security", "dashboard", "gateway")

# room -> the rooms its modules may import (its own included)
LOWER = {"schemas", "foundation"}
ALLOWED: dict[str, set[str]] = {
    "schemas": {"schemas"},
    "foundation": {"schemas", "foundation"},
    "processors": LOWER | {"processors"},  # the package doorway itself
    "processors.engine": LOWER | {"processors.engine"},
    "processors.policy": LOWER | {"processors.policy"},
    "processors.decider": LOWER | {"processors.engine", "processors.policy", "processors.decider"},
    "processors.dispatcher": LOWER | {"processors.engine", "processors.policy", "processors.decider",
                                      "processors.dispatcher"},
    "projections": LOWER | {"processors", "projections"},
    "connectors": LOWER | {"processors", "connectors"},
    # the tool registry: tools become the dispatcher's adapters (the port in processors.dispatcher)
    "tools": LOWER | {"processors", "connectors", "tools"},
    # the services, each on the ones before it (a cycle among them cannot come back)
    "security": LOWER | {"processors", "projections", "connectors", "security"},
    "client": LOWER | {"processors", "projections", "connectors", "security", "client"},
    "integrations": LOWER | {"processors", "projections", "connectors", "security", "client", "integrations"},
    "ops": LOWER | {"processors", "projections", "connectors", "security", "client", "ops"},
    "gateway": LOWER | {"processors", "projections", "connectors", "security", "client", "gateway"},
    "dashboard": LOWER | {"processors", "projections", "connectors", "security", "client", "ops", "dashboard"},
    "workers": LOWER | {"processors", "projections", "connectors", "tools"},
    # runfacts.testing: the packaged processors in one process, handing out runfacts.client's handles
    "testing": LOWER | {"processors", "projections", "connectors", *SERVICES, "tools", "testing"},
    # governed MCP: downstream servers' tools as a registry, a registry served to MCP clients
    "mcp": LOWER | {"processors", "connectors", "tools", *SERVICES, "mcp"},
    "demo": LOWER | {"processors", "projections", "connectors", *SERVICES, "tools", "workers", "dev", "demo"},
    "dev": LOWER | {"processors", "projections", "connectors", *SERVICES, "tools", "workers", "dev"},
    "cli": LOWER | {"processors", "projections", "connectors", *SERVICES, "tools", "workers", "dev", "demo",
                    "mcp", "cli"},
}
# typer and rich (the terminal) only where commands and the demo's story are printed
TERMINAL = {"typer", "rich", "click"}
TERMINAL_ROOMS = {"cli", "demo", "dev"}


def room(module: str) -> str:
    """The room of a dotted runfacts module name."""
    parts = module.split(".")
    if parts[:2] == ["runfacts", "schemas"]:
        return "schemas"
    if parts[:2] == ["runfacts", "processors"]:
        return "processors." + parts[2] if len(parts) > 2 and parts[2] in {
            "engine", "policy", "decider", "dispatcher"} else "processors"
    if len(parts) > 1 and parts[1] in {"projections", "connectors", "cli", "dev", "demo", "workers", "tools",
                                             "testing", "mcp"}:
        return parts[1]
    if len(parts) > 1 and parts[1] in SERVICES:
        return parts[1]
    return "foundation"


def allows(importer: str, imported: str) -> bool:
    mine, theirs = room(importer), room(imported)
    allowed = ALLOWED[mine]
    return theirs in allowed or theirs.split(".")[0] in allowed


def product_modules() -> dict[str, Path]:
    found = {}
    for folder, dotted in ROOTS.items():
        for path in (REPO / folder).rglob("*.py"):
            rel = path.relative_to(REPO / folder).with_suffix("").parts
            if "__pycache__" in rel:
                continue
            parts = dotted.split(".") + [p for p in rel if p != "__init__"]
            found[".".join(parts)] = path
    return found


def imports_of(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names.add(node.module)
    return names


MODULES = product_modules()


def test_every_product_module_has_a_room_when_classified() -> None:
    assert {room(m) for m in MODULES} <= set(ALLOWED)
    assert len(MODULES) > 100  # the walk found the tree (not an empty glob)


@pytest.mark.parametrize("module", sorted(MODULES))
def test_imports_follow_the_one_direction_when_parsed(module: str) -> None:
    imported = {name for name in imports_of(MODULES[module]) if name.split(".")[0] == "runfacts"}
    wrong = sorted(name for name in imported if not allows(module, name))
    assert wrong == [], f"{module} ({room(module)}) may not import {wrong} (LAYOUT rule 3)"


@pytest.mark.parametrize("module", sorted(MODULES))
def test_typer_and_rich_only_in_cli_demo_dev_when_parsed(module: str) -> None:
    terminal = {name.split(".")[0] for name in imports_of(MODULES[module])} & TERMINAL
    assert room(module) in TERMINAL_ROOMS or terminal == set(), \
        f"{module} imports {sorted(terminal)}: printing and commands belong in runfacts/cli (LAYOUT rule 4)"


def test_the_table_forbids_what_the_rules_forbid_when_asked() -> None:
    assert not allows("runfacts.topics", "runfacts.security.acls")  # the foundation imports only schemas
    assert not allows("runfacts.processors.decider.app", "runfacts.projections.user_view")
    assert not allows("runfacts.processors.dispatcher.app", "runfacts.connectors.args_store")
    assert not allows("runfacts.processors.engine.task", "runfacts.ops.client")
    assert not allows("runfacts.ops.client", "runfacts.dev.services")  # nothing shipped imports runfacts.dev
    assert not allows("runfacts.processors.engine.runner", "runfacts.processors.decider.core")
    assert allows("runfacts.connectors.refund_adapter", "runfacts.processors.dispatcher.adapters")
    assert allows("runfacts.cli.dev.crash", "runfacts.dev.crash.rows")
    # the framework bridges are a services room: on top of runfacts.client, below the CLI
    assert room("runfacts.integrations.pydantic_ai") == "integrations"
    assert allows("runfacts.integrations.pydantic_ai", "runfacts.client.run")
    assert not allows("runfacts.integrations.pydantic_ai", "runfacts.dev.provider")
    # the broker-free test stack is shipped: it never imports runfacts.dev, nothing shipped imports it
    assert allows("runfacts.testing.stack", "runfacts.tools.registry")
    assert not allows("runfacts.testing.stack", "runfacts.dev.provider")
    assert not allows("runfacts.client.run", "runfacts.testing.stack")
    # the services' cycle that lumping them into one room hid (client -> ops -> client, security -> ops)
    assert not allows("runfacts.client.client", "runfacts.ops.client")
    assert not allows("runfacts.security.acls", "runfacts.ops.dlq")
    assert not allows("runfacts.client.sender", "runfacts.dashboard.app")
    assert allows("runfacts.ops.erasure", "runfacts.client.follower")


def test_the_allowed_table_has_no_cycle_between_rooms() -> None:
    def reaches(start: str, goal: str, seen: set[str]) -> bool:
        return any(nxt == goal or (nxt not in seen and reaches(nxt, goal, seen | {nxt}))
                   for nxt in ALLOWED[start] - {start} if nxt in ALLOWED)
    cyclic = sorted(r for r in ALLOWED if reaches(r, r, {r}))
    assert cyclic == [], f"rooms that may import themselves round a cycle: {cyclic}"


def test_importing_the_client_loads_no_worker_shell() -> None:
    import subprocess
    import sys
    code = ("import sys, runfacts.client; print(sorted(m for m in sys.modules if m.startswith("
            "('runfacts.processors.decider.app', 'runfacts.processors.dispatcher.app', 'runfacts.ops', "
            "'runfacts.dashboard', 'runfacts.gateway', 'runfacts.workers'))))")
    loaded = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()
    assert loaded == "[]", f"import runfacts.client loaded {loaded}"
