"""ToolRegistry: declarations, typed arguments and results, every way a tool ends, bad input."""

from __future__ import annotations

import asyncio
import time
from typing import Annotated

import pytest
from pydantic import BaseModel, Field

from runfacts.processors.dispatcher.adapters import (
    FoundCompleted,
    FoundFailed,
    LookupUnknown,
    NotFound,
    ToolCompleted,
    ToolFailed,
    ToolRequest,
    ToolUnknown,
)
from runfacts.processors.policy.capabilities import parse_capabilities
from runfacts.processors.policy.retry import ErrorClass
from runfacts.tools import (
    LookupContext,
    OutcomeUnknown,
    RegistryError,
    ToolContext,
    ToolError,
    ToolRegistry,
    manifest_toml,
)


class Credit(BaseModel):
    credit_id: str
    amount_minor: int


class CreditArgs(BaseModel):
    account: str = Field(min_length=1)
    amount_minor: int = Field(gt=0)


def _request(args: dict, capability: str = "billing.credit", n: int = 1) -> ToolRequest:
    return ToolRequest(tool_call_id=f"tc-{n}", capability_id=capability, idempotency_key=f"key-{n}",
                       external_request_id=f"tc-{n}-a1", attempt=1, lease_epoch=1001, arguments=args)


def _registry() -> ToolRegistry:
    registry = ToolRegistry("test")
    seen: dict[str, Credit] = {}

    @registry.tool("billing.credit", risk="high", needs_approval=True, required_role="billing",
                   retry="standard", reconcile_within_ms=60_000, approval_ttl_ms=120_000)
    def credit(account: str, amount_minor: Annotated[int, Field(gt=0)], ctx: ToolContext) -> Credit:
        if account == "boom":
            raise ZeroDivisionError("division by zero")
        if account == "busy":
            raise ToolError("rate_limited", retryable=True, retry_after_ms=250)
        if account == "closed":
            raise ToolError("account_closed", "the account is closed")
        if account == "lost":
            raise OutcomeUnknown("ledger timed out after the write")
        seen[ctx.external_request_id] = Credit(credit_id=f"cr-{ctx.idempotency_key}", amount_minor=amount_minor)
        return seen[ctx.external_request_id]

    @registry.lookup("billing.credit")
    def find(ctx: LookupContext) -> Credit | None:
        if ctx.external_request_id == "refused":
            raise ToolError("account_closed")
        return seen.get(ctx.external_request_id)

    @registry.tool("billing.balance")
    async def balance(args: CreditArgs, ctx: ToolContext) -> dict[str, int]:
        await asyncio.sleep(0.01)
        return {"balanceMinor": args.amount_minor * 2, "attempt": ctx.attempt}

    return registry


def test_catalog_holds_each_declaration_when_tools_are_registered() -> None:
    catalog = _registry().catalog()
    credit = catalog.get("billing.credit")
    assert (credit.risk.value, credit.needs_approval, credit.required_role) == ("high", True, "billing")
    assert (credit.reconciliation_deadline_ms, credit.approval_ttl_ms, credit.retry.max_attempts) == (
        60_000, 120_000, 4)
    assert catalog.get("billing.balance").needs_approval is False


def test_manifest_toml_reads_back_to_the_catalog_when_exported() -> None:
    catalog = _registry().catalog()
    assert parse_capabilities(manifest_toml(catalog)) == catalog


def test_sync_tool_completes_with_its_typed_result_and_context_when_called() -> None:
    outcome = _registry().adapters()["billing.credit"].execute(
        _request({"account": "a-1", "amount_minor": 500}))
    assert isinstance(outcome, ToolCompleted)
    assert outcome.result == '{"amount_minor":500,"credit_id":"cr-key-1"}'
    assert outcome.result_ref == "billing.credit:tc-1-a1"


def test_async_tool_completes_when_it_takes_the_argument_model() -> None:
    outcome = _registry().adapters()["billing.balance"].execute(
        _request({"account": "a", "amount_minor": 7}, "billing.balance"))
    assert isinstance(outcome, ToolCompleted) and outcome.result == '{"attempt":1,"balanceMinor":14}'


def test_registering_two_tools_with_one_id_raises_naming_the_tool() -> None:
    registry = _registry()
    with pytest.raises(RegistryError, match=r"tool billing.credit: registered twice in registry 'test'"):
        @registry.tool("billing.credit")
        def other(account: str) -> None: ...


def test_args_that_fail_the_model_are_a_validation_failure_naming_tool_and_field() -> None:
    outcome = _registry().adapters()["billing.credit"].execute(_request({"account": "a", "amount_minor": -5}))
    assert isinstance(outcome, ToolFailed)
    assert (outcome.error_class, outcome.retryable, outcome.code) == (
        ErrorClass.VALIDATION, False, "invalid_arguments")
    assert "tool billing.credit" in outcome.detail and "amount_minor" in outcome.detail
    assert "greater than 0 (got -5)" in outcome.detail


def test_unknown_and_missing_args_name_the_field_when_the_model_is_built_from_parameters() -> None:
    outcome = _registry().adapters()["billing.credit"].execute(_request({"acount": "a", "amount_minor": 1}))
    assert isinstance(outcome, ToolFailed)
    assert "account: Field required" in outcome.detail and "acount: Extra inputs" in outcome.detail


def test_unexpected_exception_is_an_unknown_outcome_naming_its_class() -> None:
    # SEMANTICS.md §14: the credit may have been written before the exception (tools/test_endings.py)
    outcome = _registry().adapters()["billing.credit"].execute(_request({"account": "boom", "amount_minor": 1}))
    assert isinstance(outcome, ToolUnknown)
    assert outcome.reason.startswith("tool billing.credit raised ZeroDivisionError: division by zero")


def test_tool_error_carries_its_retryability_when_raised() -> None:
    adapter = _registry().adapters()["billing.credit"]
    busy = adapter.execute(_request({"account": "busy", "amount_minor": 1}))
    closed = adapter.execute(_request({"account": "closed", "amount_minor": 1}))
    assert isinstance(busy, ToolFailed) and isinstance(closed, ToolFailed)
    assert (busy.error_class, busy.retryable, busy.retry_after_ms) == (ErrorClass.RATE_LIMITED, True, 250)
    assert (closed.error_class, closed.retryable, closed.code) == (ErrorClass.REFUSED, False, "account_closed")
    assert ToolError("quota", retryable=True).error_class is ErrorClass.TRANSIENT
    with pytest.raises(ValueError, match="validation is not retryable by definition"):
        ToolError("validation", retryable=True)


def test_outcome_unknown_or_no_answer_in_time_is_an_unknown_outcome_to_reconcile() -> None:
    registry = _registry()

    @registry.tool("slow.tool", timeout_s=0.05)
    def slow() -> None:
        time.sleep(0.3)

    assert isinstance(registry.adapters()["billing.credit"].execute(
        _request({"account": "lost", "amount_minor": 1})), ToolUnknown)
    outcome = registry.adapters()["slow.tool"].execute(_request({}, "slow.tool"))
    assert isinstance(outcome, ToolUnknown) and "no answer within 0.05 s" in outcome.reason


def test_lookup_finds_the_value_when_the_tool_completed_in_another_process() -> None:
    registry = _registry()
    registry.adapters()["billing.credit"].execute(_request({"account": "a", "amount_minor": 9}))
    fresh = registry.adapters()["billing.credit"]  # nothing remembered: the tool's lookup answers
    found = fresh.lookup("tc-1-a1")
    assert isinstance(found, FoundCompleted) and found.result == '{"amount_minor":9,"credit_id":"cr-key-1"}'
    assert isinstance(fresh.lookup("never-sent"), NotFound)
    assert isinstance(fresh.lookup("refused"), FoundFailed)


def test_lookup_without_a_lookup_function_is_unknown_naming_the_fix_when_not_run_here() -> None:
    outcome = _registry().adapters()["billing.balance"].lookup("tc-9-a1")
    assert isinstance(outcome, LookupUnknown) and not outcome.retryable
    assert "@registry.lookup('billing.balance')" in outcome.reason


def test_result_that_does_not_fit_the_return_type_is_a_failure_naming_the_tool_when_read_only() -> None:
    registry = ToolRegistry()

    @registry.tool("bad.result", read_only=True)
    def bad() -> Credit:
        return {"credit_id": 5}  # type: ignore[return-value]

    outcome = registry.adapters()["bad.result"].execute(_request({}, "bad.result"))
    assert isinstance(outcome, ToolFailed) and outcome.code == "bad_result"
    assert "tool bad.result: result does not fit" in outcome.detail and "amount_minor" in outcome.detail


def test_bad_declarations_raise_naming_the_tool_when_registered() -> None:
    registry = ToolRegistry()
    with pytest.raises(RegistryError, match="tool x.y: retry='sometimes'"):
        registry.tool("x.y", retry="sometimes")  # type: ignore[arg-type]
    with pytest.raises(RegistryError, match="tool x.y: bad declaration"):
        registry.tool("x.y", risk="extreme")
    with pytest.raises(RegistryError, match="parameter 'amount' has no type annotation"):
        @registry.tool("x.z")
        def untyped(amount) -> None: ...  # type: ignore[no-untyped-def]
    with pytest.raises(RegistryError, match="tool x.w: lookup registered before"):
        registry.lookup("x.w")(lambda ctx: None)


def test_tools_room_has_a_doorway_and_nothing_below_it_imports_it() -> None:
    import ast
    from pathlib import Path

    import runfacts.tools as room

    assert room.__doc__ and all(getattr(room, name) is not None for name in room.__all__)
    root = Path(__file__).resolve().parents[3]
    offenders = []
    for package in ("processors", "connectors", "schemas", "projections"):
        for path in (root / package).rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text())):
                names = [node.module or ""] if isinstance(node, ast.ImportFrom) else (
                    [a.name for a in node.names] if isinstance(node, ast.Import) else [])
                offenders += [f"{path.name}: {n}" for n in names if n.startswith("runfacts.tools")]
    assert offenders == []


def test_lookup_given_as_a_parameter_answers_reconciliation_when_async() -> None:
    registry = ToolRegistry()

    async def find(ctx: LookupContext) -> dict[str, str] | None:
        return {"found": ctx.external_request_id} if ctx.external_request_id == "x-1" else None

    @registry.tool("notes.add", lookup=find)
    def add(text: str) -> dict[str, str]:
        return {"found": text}

    adapter = registry.adapters()["notes.add"]
    found = adapter.lookup("x-1")
    assert isinstance(found, FoundCompleted) and found.result == '{"found":"x-1"}'
    assert isinstance(adapter.lookup("x-2"), NotFound)
    with pytest.raises(RegistryError, match="tool notes.add: has a lookup already"):
        registry.lookup("notes.add")(find)


def test_ready_made_adapter_shares_the_id_space_and_is_built_only_when_served() -> None:
    from runfacts.tools.refund import REFUND, refund_registry

    registry = refund_registry()  # building the refund adapter would need the payment key
    assert registry.catalog().get(REFUND).needs_approval is True
    with pytest.raises(RegistryError, match="tool payments.refund: registered twice"):
        @registry.tool(REFUND)
        def shadow() -> None: ...
    assert registry.adapters(only=()) == {}
