"""call.result()'s type: the tool's declared return type when the client knows its registry
(`$RUNFACTS_TOOLS`, which `runfacts dev up --tools` exports, when importable; `learn`), else
the JSON value; a tool function stands for its capability id."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
from pydantic import BaseModel

from runfacts.client import BadArgument
from runfacts.client.client import registry_from_env
from runfacts.client.core import result_types_of
from runfacts.client.run import capability_of
from runfacts.tools import ToolContext, ToolRegistry

TOOLS = '''
from pydantic import BaseModel
from runfacts.tools import ToolContext, ToolRegistry

registry = ToolRegistry("typed")


class Credit(BaseModel):
    account: str
    amount_cents: int


@registry.tool("billing.credit")
def credit(account: str, amount_cents: int, ctx: ToolContext) -> Credit:
    return Credit(account=account, amount_cents=amount_cents)


@registry.tool("billing.note")
def note(text: str, ctx: ToolContext):
    return {"text": text}
'''


def test_the_registry_runfacts_tools_names_types_results_when_importable(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    (tmp_path / "typed_tools_mod.py").write_text(TOOLS)
    monkeypatch.syspath_prepend(str(tmp_path))
    registry = registry_from_env({"RUNFACTS_TOOLS": "typed_tools_mod:registry"})
    assert isinstance(registry, ToolRegistry)
    convert = result_types_of(registry)
    assert sorted(convert) == ["billing.credit"]  # a tool without a declared return type stays JSON
    value = convert["billing.credit"]({"account": "acct-1", "amount_cents": 5})
    assert isinstance(value, BaseModel) and type(value).__name__ == "Credit" and value.amount_cents == 5
    with caplog.at_level(logging.INFO, logger="runfacts.client"):
        assert registry_from_env({"RUNFACTS_TOOLS": "no_such_module_here:registry"}) is None
    assert "no_such_module_here" in caplog.text and "JSON values" in caplog.text
    assert registry_from_env({}) is None


def test_a_tool_function_stands_for_its_capability_id() -> None:
    registry = ToolRegistry("marks")

    @registry.tool("billing.refund")
    def refund(order: str, ctx: ToolContext) -> int:
        return 1

    assert capability_of("run-1", refund) == "billing.refund"
    assert capability_of("run-1", "billing.refund") == "billing.refund"
    with pytest.raises(BadArgument, match="registered with @registry.tool"):
        capability_of("run-1", lambda: 1)
