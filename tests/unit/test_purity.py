"""The one purity rule (STYLE §1, LAYOUT rule 7): every pure module, one forbidden set.

A pure module (a decider, a reducer, a policy check, a rendering) takes what it needs as
arguments: it imports no broker or store client, no clock, no randomness, no environment and
no socket, and calls no `now()`. This replaces the five purity tests the packages each had,
with their five different forbidden sets.
"""

from __future__ import annotations

import ast
import importlib.util
from pathlib import Path

import pytest

PURE = [
    # the wire contract's models and spec, the schema-specialised codecs
    "runfacts.schemas.base", "runfacts.schemas.common", "runfacts.schemas.events", "runfacts.schemas.commands",
    "runfacts.schemas.models", "runfacts.schemas.construct", "runfacts.schemas.upcasters",
    "runfacts.schemas.spec.fields", "runfacts.schemas.spec.events", "runfacts.schemas.spec.commands",
    "runfacts.schemas.binary.readers", "runfacts.schemas.binary.varint", "runfacts.schemas.binary.writers",
    # the stored records' versions
    "runfacts.processors.engine.versions", "runfacts.metrics",
    # the contract's limits on ids, references and amounts (decider and clients), the partitioner
    "runfacts.ids", "runfacts.partitioning",
    # the decider
    "runfacts.processors.decider.core", "runfacts.processors.decider.context",
    "runfacts.processors.decider.run_commands", "runfacts.processors.decider.tool_commands",
    "runfacts.processors.decider.state", "runfacts.processors.decider.evolve",
    "runfacts.processors.decider.evolve.run", "runfacts.processors.decider.evolve.tools",
    "runfacts.processors.decider.timers", "runfacts.processors.decider.state_json",
    "runfacts.processors.decider.memory", "runfacts.processors.decider.compensation",
    "runfacts.processors.decider.evolve.compensation",
    # policy and the dispatcher's core
    "runfacts.processors.policy.access", "runfacts.processors.policy.capabilities",
    "runfacts.processors.policy.retry", "runfacts.processors.policy.approvals",
    "runfacts.processors.policy.sources", "runfacts.processors.policy.display",
    "runfacts.processors.policy.compensation",
    "runfacts.processors.dispatcher.core",
    # projection reducers
    "runfacts.projections.facts", "runfacts.projections.records", "runfacts.projections.user_view",
    "runfacts.projections.memory",
    "runfacts.projections.audit.reducer", "runfacts.projections.audit.summary", "runfacts.projections.audit.check",
    "runfacts.projections.trajectory.reducer", "runfacts.projections.trajectory.model",
    # connectors' pure parts
    "runfacts.connectors.outbox.sql", "runfacts.connectors.outbox.debezium",
    "runfacts.connectors.relay.decisions",
    # operator views and renderings
    "runfacts.ops.control", "runfacts.ops.views", "runfacts.dashboard.html",
    "runfacts.dashboard.runpage", "runfacts.dashboard.console", "runfacts.dashboard.runlist",
    "runfacts.dashboard.charts",
    # the client's pure parts (which facts end a wait, approvals in plain words, timelines)
    "runfacts.client.outcomes", "runfacts.client.approvals", "runfacts.client.timeline", "runfacts.client.errors",
    # the tool registry's declarations and manifest
    "runfacts.tools.registry", "runfacts.tools.spec", "runfacts.tools.errors", "runfacts.tools.manifest",
    # crypto-shredding: sealing, pseudonyms, key wrapping, THE reveal (keys and nonces come in)
    "runfacts.privacy.envelope", "runfacts.privacy.fields",
    # the framework bridges' verdict on a gated call, and their errors
    "runfacts.integrations.facts", "runfacts.integrations.errors",
    # the HTTP gateway's contract, problem documents, limits and OpenAPI document
    "runfacts.gateway.models", "runfacts.gateway.problems", "runfacts.gateway.limits", "runfacts.gateway.openapi",
    # governed MCP: the operator's manifest, what an MCP answer means
    "runfacts.mcp.manifest", "runfacts.mcp.results",
]
FORBIDDEN = {"confluent_kafka", "rocksdict", "fastavro", "time", "uuid", "random", "os", "socket", "secrets"}
CLOCK_CALLS = {"now", "utcnow", "today"}


def _tree(module: str) -> ast.Module:
    spec = importlib.util.find_spec(module)
    assert spec is not None and spec.origin is not None, f"{module} is listed as pure but does not exist"
    return ast.parse(Path(spec.origin).read_text())


def _imported_roots(tree: ast.Module) -> set[str]:
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            found.add(node.module.split(".")[0])
    return found


@pytest.mark.parametrize("module", PURE)
def test_pure_module_imports_nothing_forbidden_when_parsed(module: str) -> None:
    bad = _imported_roots(_tree(module)) & FORBIDDEN
    assert bad == set(), f"{module} is pure but imports {sorted(bad)}: take the value as an argument"


@pytest.mark.parametrize("module", PURE)
def test_pure_module_reads_no_clock_when_parsed(module: str) -> None:
    calls = {node.func.attr for node in ast.walk(_tree(module))
             if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)}
    assert calls & CLOCK_CALLS == set(), f"{module} is pure but reads the clock: take `now` as an argument"


def test_purity_check_catches_a_forbidden_import_when_one_is_written() -> None:
    tree = ast.parse("import os.path\nfrom time import monotonic\nfrom runfacts.schemas import codec\n")
    assert _imported_roots(tree) & FORBIDDEN == {"os", "time"}
