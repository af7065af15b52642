"""The OpenAI Agents SDK bridge without a broker: the version check at import (faked version
strings), a framework-free doorway, a `needs_approval` tool without a gate refused, the extras
pin, and the docs' code being the tested example's."""

from __future__ import annotations

import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
from client_support import docs_code_not_in_example

pytest.importorskip("agents", reason="pip install -e '.[dev]' installs openai-agents")
from agents import function_tool  # noqa: E402

from runfacts.integrations import IncompatibleFramework, UngatedTool  # noqa: E402
from runfacts.integrations.openai_agents import (  # noqa: E402
    PACKAGE,
    SUPPORTED,
    Gate,
    check_version,
    gated_tools,
    installed_version,
)

REPO = Path(__file__).resolve().parents[3]


def test_installed_openai_agents_is_in_the_supported_range_when_checked() -> None:
    check_version(installed_version())


@pytest.mark.parametrize("found", ["0.23.9", "0.25.0", "1.0.0", "dev"])
def test_check_version_raises_naming_the_range_when_the_version_is_incompatible(found: str) -> None:
    with pytest.raises(ImportError) as raised:
        check_version(found)
    assert isinstance(raised.value, IncompatibleFramework)
    assert f"openai-agents {found} is installed" in str(raised.value) and SUPPORTED in str(raised.value)
    assert "runfacts[openai-agents]" in str(raised.value)


def test_importing_the_bridge_fails_clearly_when_an_incompatible_version_is_installed() -> None:
    code = ("import importlib.metadata as m\n"
            "real = m.version\n"
            "m.version = lambda name: '0.9.0' if name == 'openai-agents' else real(name)\n"
            "import runfacts.integrations.openai_agents\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 1
    assert f"IncompatibleFramework: openai-agents 0.9.0 is installed; runfacts.integrations supports " \
           f"openai-agents{SUPPORTED}" in done.stderr


def test_the_doorway_imports_no_openai_agents_when_imported() -> None:
    code = "import sys, runfacts.integrations; print([m for m in ('agents', 'openai') if m in sys.modules])"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and done.stdout.strip() == "[]", done.stderr


def test_a_needs_approval_tool_without_a_gate_is_refused_and_others_pass_through() -> None:
    @function_tool(needs_approval=True)
    def wire(iban: str) -> str:
        """Wire money."""
        return iban

    @function_tool
    def lookup(orderId: str) -> str:  # noqa: N803
        """Look an order up."""
        return orderId

    with pytest.raises(UngatedTool, match="tool 'wire' requires approval but has no runfacts gate"):
        gated_tools([wire, lookup], {})
    [gated, same] = gated_tools([wire, lookup], {"wire": Gate("payments.wire", target="iban")})
    assert same is lookup and gated.name == "wire" and gated.params_json_schema == wire.params_json_schema
    assert callable(gated.needs_approval)  # the call is proposed to runfacts before the SDK asks


def test_the_extras_pin_the_range_the_bridge_checks_when_pyproject_is_read() -> None:
    extras = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    assert f"{PACKAGE}{SUPPORTED}" in extras["openai-agents"] and f"{PACKAGE}{SUPPORTED}" in extras["dev"]


def test_the_docs_openai_agents_code_is_the_tested_example_verbatim_when_read() -> None:
    shown, missing = docs_code_not_in_example("OpenAI Agents SDK", "openai_agents_refund.py")
    assert shown >= 3 and missing == [], f"docs/integrations.md shows code the example does not run: {missing}"


def test_arguments_that_fail_the_declared_schema_are_named_in_the_sdks_own_words() -> None:
    from runfacts.integrations.openai_agents import invalid_arguments, validation_text

    @function_tool(needs_approval=True)
    def refund(orderId: str, amountMinor: int, currency: str = "EUR") -> dict:  # noqa: N803
        """Refund."""
        raise RuntimeError

    schema = refund.params_json_schema
    assert invalid_arguments(schema, {"orderId": "o-1", "amountMinor": 100, "currency": "EUR"}) is None
    missing = invalid_arguments(schema, {"orderId": "o-1"})
    assert missing is not None and "'amountMinor' is a required property" in missing
    wrong = invalid_arguments(schema, {"orderId": "o-1", "amountMinor": "lots", "currency": "EUR"})
    assert wrong is not None and wrong.startswith("amountMinor: 'lots' is not of type 'integer'")
    text = validation_text("refund", missing)
    assert text.startswith("Invalid JSON input for tool refund: ") and "nobody was asked" in text


def test_a_decider_invalid_arguments_rejection_is_the_tools_validation_output_not_an_interruption() -> None:
    import asyncio

    from agents import Agent, RunConfig, Runner
    from agents.testing import ModelStep, ScriptedModel, assistant_message, function_call

    from runfacts.integrations.openai_agents import gated

    from .test_langgraph import RefusingRun

    @function_tool(needs_approval=True)
    def refund(orderId: str, amountMinor: int) -> dict:  # noqa: N803
        """Refund."""
        raise RuntimeError("never runs here")

    def report(call: object) -> list:
        outputs = [str(i["output"]) for i in call.input  # type: ignore[attr-defined]
                   if isinstance(i, dict) and i.get("type") == "function_call_output"]
        return [assistant_message(f"tool said: {outputs[-1]}")]

    ask = function_call("refund", {"orderId": "o-1", "amountMinor": 250000}, call_id="fc-1")
    model = ScriptedModel([ModelStep.respond(lambda _: [ask]), ModelStep.respond(report)])
    tool = gated(refund, Gate("payments.refund", target="orderId"), run_of=lambda ctx: RefusingRun())  # type: ignore[arg-type,return-value]
    agent = Agent(name="refunds", model=model, tools=[tool])
    result = asyncio.run(Runner.run(agent, "refund", run_config=RunConfig(tracing_disabled=True)))
    assert result.interruptions == []  # nobody is asked
    assert result.final_output.startswith("tool said: Invalid JSON input for tool refund: amountMinor: Input should")
