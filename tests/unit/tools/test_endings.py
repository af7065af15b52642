"""How a registered tool's ending becomes an outcome (SEMANTICS.md §14, docs/tools.md "How a
tool ends"): for a tool with side effects only a declared "did not happen" is a failure, every
other ending is unknown; a read-only or idempotent tool's endings are retryable failures."""

from __future__ import annotations

import time
from collections.abc import Callable

import httpx
import pytest
import requests

from runfacts.processors.dispatcher.adapters import ToolCompleted, ToolFailed, ToolRequest, ToolUnknown
from runfacts.processors.policy.capabilities import parse_capabilities
from runfacts.tools import OutcomeUnknown, ToolContext, ToolError, ToolRegistry, manifest_toml

LEDGER: list[str] = []


def _raises(exc: BaseException) -> Callable[[], BaseException]:
    return lambda: exc


def _registry(raise_: Callable[[], BaseException] | None, **declared: object) -> ToolRegistry:
    registry = ToolRegistry("endings")

    @registry.tool("ledger.charge", risk="high", retry="standard", timeout_s=0.5, **declared)  # type: ignore[arg-type]
    def charge(account: str, ctx: ToolContext) -> dict[str, str]:
        LEDGER.append(ctx.idempotency_key)  # the side effect happened first ...
        if raise_ is not None:
            raise raise_()  # ... then the tool ended badly
        return {"account": account}

    return registry


def _execute(registry: ToolRegistry, arguments: dict[str, object] | None = None) -> object:
    adapter = registry.adapters()["ledger.charge"]
    return adapter.execute(ToolRequest(tool_call_id="tc-1", capability_id="ledger.charge", idempotency_key="k-1",
                                       external_request_id="tc-1-a1", attempt=1, lease_epoch=1001,
                                       arguments={"account": "acct-1"} if arguments is None else arguments))


_REQUEST = httpx.Request("POST", "https://billing.example/credits")
UNDECLARED = [
    ConnectionResetError(104, "Connection reset by peer"),
    ConnectionRefusedError(111, "Connection refused"),  # undeclared: the tool may have sent before
    ConnectionAbortedError("aborted"),
    BrokenPipeError("broken pipe"),
    TimeoutError("timed out"),
    OSError("network unreachable"),
    ZeroDivisionError("a bug after the write"),
    KeyError("missing"),
    RuntimeError("anything"),
    httpx.ReadTimeout("read timed out", request=_REQUEST),
    httpx.RemoteProtocolError("server disconnected without sending a response", request=_REQUEST),
    httpx.ConnectError("undeclared connect error", request=_REQUEST),
    requests.exceptions.ReadTimeout("read timed out"),
    requests.exceptions.ConnectionError("connection aborted"),
]


@pytest.mark.parametrize("exc", UNDECLARED, ids=lambda e: type(e).__name__)
def test_undeclared_exception_is_result_unknown_when_the_tool_has_side_effects(exc: BaseException) -> None:
    outcome = _execute(_registry(_raises(exc)))
    assert isinstance(outcome, ToolUnknown), outcome
    assert type(exc).__name__ in outcome.reason and "ledger.charge" in outcome.reason
    assert "may have happened" in outcome.reason


@pytest.mark.parametrize("exc", UNDECLARED, ids=lambda e: type(e).__name__)
def test_undeclared_exception_is_a_retryable_failure_when_the_tool_is_read_only(exc: BaseException) -> None:
    outcome = _execute(_registry(_raises(exc), read_only=True))
    assert isinstance(outcome, ToolFailed), outcome
    assert (outcome.error_class.value, outcome.retryable, outcome.code) == ("transient", True, type(exc).__name__)


def test_undeclared_exception_is_a_retryable_failure_when_the_tool_is_idempotent() -> None:
    outcome = _execute(_registry(_raises(ConnectionResetError("reset")), idempotent=True))
    assert isinstance(outcome, ToolFailed) and (outcome.error_class.value, outcome.retryable) == ("transient", True)


@pytest.mark.parametrize(("error", "expected"), [
    (ToolError("insufficient_funds"), ("refused", False)),
    (ToolError("account_closed", "acct-1 is closed", retryable=False), ("refused", False)),
    (ToolError("transient", "connection refused before sending", retryable=True, happened=False),
     ("transient", True)),
    (ToolError("rate_limited", retryable=True, retry_after_ms=500), ("rate_limited", True)),
    (ToolError("validation", "amount over the account's limit"), ("validation", False)),
    (ToolError("permission"), ("permission", False)),
    (ToolError("conflict"), ("conflict", False)),
    (ToolError("provider"), ("provider", False)),
], ids=lambda v: v.code if isinstance(v, ToolError) else "")
def test_declared_tool_error_is_a_failure_when_the_tool_says_nothing_happened(
        error: ToolError, expected: tuple[str, bool]) -> None:
    for declared in ({}, {"read_only": True}):
        outcome = _execute(_registry(_raises(error), **declared))
        assert isinstance(outcome, ToolFailed), outcome
        assert (outcome.error_class.value, outcome.retryable) == expected and outcome.code == error.code


def test_tool_error_that_may_have_happened_is_result_unknown_when_declared() -> None:
    outcome = _execute(_registry(_raises(ToolError("provider", "502 after the commit", happened=True))))
    assert isinstance(outcome, ToolUnknown) and "502 after the commit" in outcome.reason


def test_tool_error_refuses_retryable_and_happened_together_when_built() -> None:
    with pytest.raises(ValueError, match="reconciled, never retried"):
        ToolError("transient", retryable=True, happened=True)


def test_outcome_unknown_is_result_unknown_when_the_tool_has_side_effects() -> None:
    assert isinstance(_execute(_registry(_raises(OutcomeUnknown("backend timed out")))), ToolUnknown)
    read_only = _execute(_registry(_raises(OutcomeUnknown("backend timed out")), read_only=True))
    assert isinstance(read_only, ToolFailed) and read_only.retryable


def test_no_answer_in_time_is_result_unknown_unless_the_tool_is_read_only() -> None:
    def slow() -> BaseException:
        time.sleep(1.0)
        return RuntimeError("late")

    assert isinstance(_execute(_registry(slow)), ToolUnknown)
    late = _execute(_registry(slow, read_only=True))
    assert isinstance(late, ToolFailed) and (late.code, late.retryable) == ("timeout", True)


def test_result_that_does_not_fit_is_result_unknown_when_the_tool_acted() -> None:
    registry = ToolRegistry("endings")

    @registry.tool("ledger.charge", risk="high")
    def charge(account: str) -> int:
        return "not a number"  # type: ignore[return-value]

    outcome = _execute(registry)
    assert isinstance(outcome, ToolUnknown) and "result does not fit" in outcome.reason


def test_invalid_arguments_fail_without_calling_the_tool_when_they_do_not_fit() -> None:
    before = len(LEDGER)
    outcome = _execute(_registry(None), {"account": 7})
    assert isinstance(outcome, ToolFailed) and outcome.error_class.value == "validation"
    assert len(LEDGER) == before


def test_completed_when_the_tool_returns() -> None:
    outcome = _execute(_registry(None))
    assert isinstance(outcome, ToolCompleted) and outcome.result == '{"account":"acct-1"}'


def test_manifest_carries_read_only_idempotent_and_lookup_when_exported() -> None:
    registry = ToolRegistry("flags")

    @registry.tool("ledger.read", risk="low", read_only=True)
    def read(account: str) -> int:
        return 1

    @registry.tool("ledger.put", risk="low", idempotent=True)
    def put(account: str) -> int:
        return 1

    @registry.tool("ledger.charge", risk="high")
    def charge(account: str) -> int:
        return 1

    @registry.tool("ledger.refund", risk="high")
    def refund(account: str) -> int:
        return 1

    @registry.lookup("ledger.refund")
    def find(ctx: object) -> None:
        return None

    catalog = registry.catalog()
    flags = {cid: (m.read_only, m.idempotent, m.has_lookup, m.reruns_safely)
             for cid, m in catalog.capabilities.items()}
    assert flags == {"ledger.read": (True, False, False, True), "ledger.put": (False, True, False, True),
                     "ledger.charge": (False, False, False, False), "ledger.refund": (False, False, True, False)}
    text = manifest_toml(catalog)
    assert "readOnly = true" in text and "hasLookup = false" in text
    assert parse_capabilities(text) == catalog


def test_manifest_without_the_flags_reads_as_a_reconcilable_side_effect() -> None:
    (manifest,) = parse_capabilities("""
[[capability]]
capabilityId = "payments.refund"
risk = "high"
requiredRole = "support_agent"
needsApproval = true
reconciliationDeadlineMs = 600000
[capability.retry]
maxAttempts = 3
baseBackoffMs = 200
maxBackoffMs = 5000
deadlineMs = 30000
""").capabilities.values()
    assert (manifest.read_only, manifest.idempotent, manifest.has_lookup, manifest.reruns_safely) == (
        False, False, True, False)


def test_lookup_that_raises_is_asked_again_unless_it_declares_a_refusal() -> None:
    from runfacts.processors.dispatcher.adapters import FoundFailed, LookupUnknown

    for raised, expected in ((ConnectionResetError("reset"), True), (OutcomeUnknown("not yet"), True)):
        registry = ToolRegistry("lookups")

        @registry.tool("ledger.charge", risk="high")
        def charge(account: str) -> int:
            return 1

        @registry.lookup("ledger.charge")
        def find(ctx: object, raised: BaseException = raised) -> None:
            raise raised

        found = registry.adapters()["ledger.charge"].lookup("tc-9-a1")
        assert isinstance(found, LookupUnknown) and found.retryable is expected, found
    registry = ToolRegistry("lookups")

    @registry.tool("ledger.charge", risk="high")
    def charge2(account: str) -> int:
        return 1

    @registry.lookup("ledger.charge")
    def refused(ctx: object) -> None:
        raise ToolError("refused", "the backend declined it")

    assert isinstance(registry.adapters()["ledger.charge"].lookup("tc-9-a1"), FoundFailed)
