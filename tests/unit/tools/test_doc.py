"""docs/tools.md: its tool example runs, and its table says what the registry does."""

from __future__ import annotations

import json
import re
from pathlib import Path

from runfacts.processors.dispatcher.adapters import FoundCompleted, ToolCompleted, ToolFailed, ToolRequest
from runfacts.processors.policy.capabilities import parse_capabilities
from runfacts.tools import manifest_toml

DOC = Path(__file__).resolve().parents[3] / "docs" / "tools.md"


def _example() -> dict:
    block = re.findall(r"```python\n(.*?)```", DOC.read_text(), re.S)[0]
    namespace: dict = {"__name__": "doc_tools"}
    exec(compile(block, str(DOC), "exec"), namespace)  # noqa: S102 - the documented example
    return namespace


def _request(args: dict, n: int = 1) -> ToolRequest:
    return ToolRequest(tool_call_id=f"tc-{n}", capability_id="billing.credit", idempotency_key=f"k-{n}",
                       external_request_id=f"tc-{n}-a1", attempt=1, lease_epoch=1001, arguments=args)


def test_documented_tool_credits_once_per_key_and_its_lookup_finds_the_value() -> None:
    registry = _example()["registry"]
    adapter = registry.adapters()["billing.credit"]
    first = adapter.execute(_request({"account": "acct-1", "amount_minor": 300}))
    again = adapter.execute(_request({"account": "acct-1", "amount_minor": 300}))
    assert isinstance(first, ToolCompleted) and isinstance(again, ToolCompleted)
    assert json.loads(first.result) == {"credit_id": "cr-tc-1", "amount_minor": 300} and first.result == again.result
    fresh = registry.adapters()["billing.credit"]
    assert isinstance(found := fresh.lookup("tc-1-a1"), FoundCompleted) and found.result == first.result


def test_documented_errors_are_what_the_table_says() -> None:
    adapter = _example()["registry"].adapters()["billing.credit"]
    closed = adapter.execute(_request({"account": "acct-0", "amount_minor": 1}))
    bad = adapter.execute(_request({"account": "acct-1", "amount_minor": -5}))
    assert isinstance(closed, ToolFailed) and (closed.error_class.value, closed.retryable) == ("refused", False)
    assert isinstance(bad, ToolFailed) and bad.error_class.value == "validation"
    assert "tool billing.credit: arguments do not fit" in bad.detail
    assert "amount_minor: Input should be greater than 0 (got -5)" in bad.detail


def test_documented_conditional_approval_and_display_run() -> None:
    """The "What the approver sees" block: its asserts are the behaviour (rule, display, validation)."""
    block = re.findall(r"```python\n(.*?)```", DOC.read_text(), re.S)[1]
    namespace: dict = {"__name__": "doc_display"}
    exec(compile(block, str(DOC), "exec"), namespace)  # noqa: S102 - the documented example
    manifest = namespace["manifest"]
    assert manifest.approval_when[0].describe() == "amount_cents > 5000"
    assert parse_capabilities(manifest_toml(namespace["credits"].catalog())) == namespace["credits"].catalog()


def test_documented_declaration_is_the_exported_manifest() -> None:
    catalog = _example()["registry"].catalog()
    credit = catalog.get("billing.credit")
    assert (credit.needs_approval, credit.required_role, credit.retry.max_attempts) == (True, "support_agent", 4)
    assert parse_capabilities(manifest_toml(catalog)) == catalog
