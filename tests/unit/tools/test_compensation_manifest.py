"""A capability declares its compensation in the manifest and the registry (issue 35, item 1)."""

from __future__ import annotations

import pytest

from runfacts.processors.policy.capabilities import parse_capabilities
from runfacts.schemas.errors import ConfigError
from runfacts.tools import ToolRegistry
from runfacts.tools.errors import RegistryError
from runfacts.tools.manifest import manifest_toml

RETRY = """[capability.retry]
maxAttempts = 4
baseBackoffMs = 200
maxBackoffMs = 5000
deadlineMs = 30000
"""
CHARGE_SCHEMA = ('{"properties":{"orderId":{"type":"string"},"amountMinor":{"type":"integer"},'
                 '"card":{"type":"string","pii":true}},"required":["orderId","amountMinor"],"type":"object"}')
REFUND_SCHEMA = ('{"properties":{"chargeId":{"type":"string"},"amountMinor":{"type":"integer"}},'
                 '"required":["chargeId","amountMinor"],"type":"object"}')


def manifest(arguments: str = 'chargeId = "result.chargeId", amountMinor = "args.amountMinor"',
             target: str = "payments.refund") -> str:
    return f"""
[[capability]]
capabilityId = "payments.charge"
risk = "high"
requiredRole = "support_agent"
needsApproval = false
reconciliationDeadlineMs = 600000
argumentSchema = '{CHARGE_SCHEMA}'
[capability.compensation]
capabilityId = "{target}"
arguments = {{ {arguments} }}
{RETRY}
[[capability]]
capabilityId = "payments.refund"
risk = "high"
requiredRole = "support_agent"
needsApproval = true
reconciliationDeadlineMs = 600000
argumentSchema = '{REFUND_SCHEMA}'
{RETRY}"""


def test_manifest_declares_compensation_and_reads_back() -> None:
    catalog = parse_capabilities(manifest())
    comp = catalog.get("payments.charge").compensation
    assert comp is not None and comp.capability_id == "payments.refund"
    assert comp.sources() == [("chargeId", "result", ("chargeId",)), ("amountMinor", "args", ("amountMinor",))]
    assert catalog.get("payments.refund").compensation is None
    assert parse_capabilities(manifest_toml(catalog)) == catalog


@pytest.mark.parametrize(("arguments", "target", "names"), [
    ('chargeId = "res.chargeId", amountMinor = "args.amountMinor"', "payments.refund",
     ["arguments.chargeId", "'args.<argument>'", "'result.<field>'"]),
    ('chargeId = "result.chargeId", amountMinor = "args.amount"', "payments.refund",
     ["arguments.amountMinor reads args.amount, not an argument", "orderId, amountMinor, card"]),
    ('chargeId = "args.card", amountMinor = "args.amountMinor"', "payments.refund",
     ["args.card, a personal field"]),
    ('chargeId = "result.chargeId"', "payments.refund", ["requires amountMinor", "map each"]),
    ('chargeId = "result.chargeId", amountMinor = "args.amountMinor", note = "args.orderId"',
     "payments.refund", ["arguments.note", "has no argument 'note'"]),
    ('chargeId = "result.chargeId", amountMinor = "args.amountMinor"', "payments.void",
     ["names no capability", "declare payments.void"]),
    ('chargeId = "result.chargeId", amountMinor = "args.amountMinor"', "payments.charge",
     ["the capability itself"]),
])
def test_manifest_rejects_bad_compensation_naming_field_and_fix(arguments: str, target: str,
                                                                names: list[str]) -> None:
    with pytest.raises(ConfigError) as raised:
        parse_capabilities(manifest(arguments, target), "tools.toml")
    message = str(raised.value)
    assert "tools.toml:capability[0]" in message
    for name in names:
        assert name in message


def test_registry_declares_compensation_in_its_catalog() -> None:
    registry = ToolRegistry()

    @registry.tool("shop.charge", compensation=("shop.refund", {"charge_id": "result.charge_id",
                                                                "amount_minor": "args.amount_minor"}))
    def charge(order_id: str, amount_minor: int) -> dict:  # type: ignore[type-arg]
        return {"charge_id": "c-1"}

    @registry.tool("shop.refund")
    def refund(charge_id: str, amount_minor: int) -> None:
        return None

    comp = registry.catalog().get("shop.charge").compensation
    assert comp is not None and comp.arguments["charge_id"] == "result.charge_id"


def test_registry_rejects_compensation_of_an_unknown_argument() -> None:
    registry = ToolRegistry()

    @registry.tool("shop.charge", compensation=("shop.refund", {"charge_id": "result.charge_id"}))
    def charge(order_id: str) -> None:
        return None

    @registry.tool("shop.refund")
    def refund(charge_id: str, amount_minor: int) -> None:
        return None

    with pytest.raises(RegistryError, match="requires amount_minor"):
        registry.catalog()

    def other(order_id: str) -> None:
        return None

    with pytest.raises(RegistryError, match="args.amount, not an argument"):
        registry.tool("shop.other", compensation=("shop.refund", {"charge_id": "args.amount"}))(other)


def test_docs_tools_compensation_example_runs() -> None:
    import re
    from pathlib import Path

    doc = Path(__file__).resolve().parents[3] / "docs" / "tools.md"
    [block] = [b for b in re.findall(r"```python\n(.*?)```", doc.read_text(), re.S) if "compensation=" in b]
    namespace: dict = {"__name__": "doc_compensation"}  # type: ignore[type-arg]
    exec(compile(block, str(doc), "exec"), namespace)  # noqa: S102 - the documented example
    assert namespace["comp"].capability_id == "shop.refund"
