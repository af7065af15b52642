"""The Pydantic AI bridge without a broker: the version check (installed and faked), the light
doorway, a gate-less approval tool refused (real pydantic-ai, TestModel), deps without a run."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from client_support import docs_code_not_in_example

pytest.importorskip("pydantic_ai", reason="pip install -e '.[dev]' installs pydantic-ai-slim")
from pydantic_ai import Agent, ApprovalRequired  # noqa: E402
from pydantic_ai.models.test import TestModel  # noqa: E402
from pydantic_ai.tools import DeferredToolRequests  # noqa: E402
from pydantic_ai.toolsets import FunctionToolset  # noqa: E402

from runfacts.client import BadArgument  # noqa: E402
from runfacts.integrations import IncompatibleFramework, UngatedTool  # noqa: E402
from runfacts.integrations.pydantic_ai import (  # noqa: E402
    SUPPORTED,
    Gate,
    RunfactsApprovals,
    check_version,
    installed_version,
)

REPO = Path(__file__).resolve().parents[3]


def test_the_docs_pydantic_ai_code_is_the_tested_example_verbatim_when_read() -> None:
    shown, missing = docs_code_not_in_example("Pydantic AI", "pydantic_ai_refund.py")
    assert shown >= 3 and missing == [], f"docs/integrations.md shows code the example does not run: {missing}"


def test_installed_pydantic_ai_is_in_the_supported_range_when_checked() -> None:
    check_version(installed_version())  # an incompatible install fails here, naming the range


@pytest.mark.parametrize("found", ["2.67.9", "3.0.0", "1.107.10", "not-a-version"])
def test_check_version_raises_naming_the_range_when_the_version_is_incompatible(found: str) -> None:
    with pytest.raises(IncompatibleFramework) as raised:
        check_version(found)
    assert f"pydantic-ai-slim {found} is installed" in str(raised.value)
    assert SUPPORTED in str(raised.value) and "runfacts[pydantic-ai]" in str(raised.value)


def test_check_version_accepts_the_range_and_names_a_missing_install_when_none() -> None:
    for found in ("2.68.0", "2.99.1"):
        check_version(found)
    with pytest.raises(IncompatibleFramework, match="pydantic-ai-slim is not installed"):
        check_version(None)


def test_importing_the_bridge_fails_clearly_when_an_incompatible_version_is_installed() -> None:
    code = ("import importlib.metadata as m\n"
            "real = m.version\n"
            "m.version = lambda name: '2.40.0' if name == 'pydantic-ai-slim' else real(name)\n"
            "import runfacts.integrations.pydantic_ai\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 1
    assert "IncompatibleFramework: pydantic-ai-slim 2.40.0 is installed" in done.stderr
    assert SUPPORTED in done.stderr


def test_the_doorway_imports_no_framework_when_imported() -> None:
    code = ("import sys, runfacts.integrations\n"
            "print(sorted(m for m in sys.modules if m.startswith(('pydantic_ai', 'langgraph'))))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


def agent_with(tools: FunctionToolset, gates: dict[str, Gate]) -> Agent:
    return Agent(TestModel(), toolsets=[tools], output_type=[str, DeferredToolRequests],
                 capabilities=[RunfactsApprovals(gates)])


def test_an_approval_tool_without_a_gate_is_refused_before_anything_runs() -> None:
    tools = FunctionToolset()
    ran: list[str] = []

    @tools.tool_plain(requires_approval=True)
    def wipe(path: str) -> str:
        ran.append(path)
        return "wiped"

    with pytest.raises(UngatedTool, match="'wipe' requires approval but has no runfacts gate"):
        agent_with(tools, {}).run_sync("wipe it")
    assert ran == []


def test_a_tool_raising_approval_required_without_a_gate_is_refused() -> None:
    tools = FunctionToolset()

    @tools.tool_plain
    def delete(path: str) -> str:
        raise ApprovalRequired(metadata={"why": "protected"})

    with pytest.raises(UngatedTool, match="'delete'"):
        agent_with(tools, {}).run_sync("delete it")


def test_a_gated_call_without_a_runfacts_run_in_deps_names_the_fix() -> None:
    tools = FunctionToolset()

    @tools.tool_plain(requires_approval=True)
    def refund(orderId: str) -> str:  # noqa: N803
        return "never"

    with pytest.raises(BadArgument, match="pass the runfacts Run as deps="):
        agent_with(tools, {"refund": Gate("payments.refund", target="orderId")}).run_sync("refund", deps=None)


def test_facts_only_sends_every_resume_denial_or_result_of_a_gated_call_to_the_facts() -> None:
    from pydantic_ai.messages import ToolCallPart, ToolReturn
    from pydantic_ai.tools import ToolApproved, ToolDenied

    from runfacts.integrations.pydantic_ai import CLAIM_KEY, Gate, facts_only

    gates = {"refund": Gate("payments.refund", target="orderId")}
    calls = [ToolCallPart("refund", {"orderId": f"o-{n}"}, tool_call_id=f"c{n}") for n in range(5)]
    calls.append(ToolCallPart("lookup", {"orderId": "o-9"}, tool_call_id="c9"))
    approved = ToolApproved()
    results = {"c0": ToolDenied("no"), "c1": {"refundId": "R-MADE-UP"}, "c2": ToolReturn("made up"),
               "c3": approved, "c4": "skip", "c9": {"found": True}}
    metadata = facts_only(gates, calls, results, {"c1": {"mine": 1}})
    assert all(isinstance(results[c], ToolApproved) for c in ("c0", "c1", "c2"))  # the wrapper answers them
    assert {c: metadata[c][CLAIM_KEY] for c in ("c0", "c1", "c2")} == {
        "c0": "denied", "c1": "a tool result", "c2": "a tool result"}
    assert metadata["c1"]["mine"] == 1  # the resume's own metadata kept
    assert results["c3"] is approved and "c3" not in metadata  # an approval is checked when the tool runs
    assert results["c4"] == "skip" and results["c9"] == {"found": True}  # answered before; not gated


def test_a_decider_invalid_arguments_rejection_is_pydantic_ais_retry_not_an_approval() -> None:
    import asyncio

    from pydantic_ai import Agent
    from pydantic_ai.messages import ModelResponse, TextPart, ToolCallPart, ToolReturnPart
    from pydantic_ai.models.function import FunctionModel
    from pydantic_ai.tools import DeferredToolRequests
    from pydantic_ai.toolsets import FunctionToolset

    from runfacts.integrations.pydantic_ai import Gate, RunfactsApprovals

    from .test_langgraph import RefusingRun

    tools, told = FunctionToolset(), []

    @tools.tool_plain(requires_approval=True)
    def refund(orderId: str, amountMinor: int) -> dict:  # noqa: N803
        raise RuntimeError("never runs here")

    def model(messages: list, info: object) -> ModelResponse:
        retried = [p for p in messages[-1].parts if isinstance(p, ToolReturnPart) and p.outcome == "retried"]
        if retried:
            told.extend(retried)
            return ModelResponse(parts=[TextPart("told to fix the arguments")])
        return ModelResponse(parts=[ToolCallPart("refund", {"orderId": "o-1", "amountMinor": 250000})])

    agent = Agent(FunctionModel(model), toolsets=[tools], output_type=[str, DeferredToolRequests],
                  capabilities=[RunfactsApprovals({"refund": Gate("payments.refund", target="orderId")},
                                                  run_of=lambda ctx: RefusingRun())])  # type: ignore[arg-type,return-value]
    result = asyncio.run(agent.run("refund o-1 250000"))
    assert result.output == "told to fix the arguments"  # not DeferredToolRequests: nobody is asked
    assert "amountMinor: Input should be <= 100000" in str(told[0].content)
