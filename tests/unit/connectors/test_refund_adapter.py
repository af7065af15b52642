"""RefundAdapter against the in-process payment simulator, one test per fault."""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from runfacts.connectors.refund_adapter import RefundAdapter, RefundAdapterSettings
from runfacts.dev.provider.server import PaymentSimulator, SimSettings
from runfacts.processors.dispatcher.adapters import (
    FoundCompleted,
    FoundFailed,
    LookupUnknown,
    NotFound,
    ToolCompleted,
    ToolFailed,
    ToolRequest,
    ToolUnknown,
    Verification,
)
from runfacts.processors.policy.retry import ErrorClass
from runfacts.schemas.errors import ConfigError

KEY = "sk_test_provider"


@pytest.fixture
def sim(tmp_path: Path) -> Iterator[PaymentSimulator]:
    with PaymentSimulator(SimSettings(api_key=KEY, ledger_path=tmp_path / "ledger.jsonl",
                                      max_amount_minor=50_000)) as simulator:
        yield simulator


def adapter_for(url: str, key: str = KEY, read_timeout_ms: int = 2000) -> RefundAdapter:
    return RefundAdapter(RefundAdapterSettings(url=url, api_key=key, connect_timeout_ms=500,
                                               read_timeout_ms=read_timeout_ms))


@pytest.fixture
def adapter(sim: PaymentSimulator) -> RefundAdapter:
    return adapter_for(sim.url)


def refund_request(
    n: int = 1, *, epoch: int = 1, amount: int = 1999, attempt: int = 1
) -> ToolRequest:
    return ToolRequest(
        tool_call_id=f"tc-{n}", capability_id="payments.refund",
        idempotency_key=f"refund:order-{n:03d}:abc{n}",
        external_request_id=f"xr-{n}-{attempt}",
        attempt=attempt, lease_epoch=epoch,
        arguments={"orderId": f"order-{n:03d}", "amountMinor": amount, "currency": "EUR"},
    )


def test_execute_completes_with_confirmed_success_when_provider_is_healthy(sim, adapter):
    outcome = adapter.execute(refund_request())
    assert isinstance(outcome, ToolCompleted)
    assert outcome.verification is Verification.CONFIRMED_SUCCESS
    assert outcome.result_ref == sim.ledger()[0].refund_id
    assert len(outcome.result_hash) == 64 and outcome.replayed is False
    assert len(sim.ledger()) == 1


def test_execute_returns_first_refund_without_new_ledger_entry_when_key_repeats(sim, adapter):
    first = adapter.execute(refund_request())
    again = adapter.execute(refund_request(attempt=2))
    assert isinstance(first, ToolCompleted) and isinstance(again, ToolCompleted)
    assert (again.result_ref, again.result_hash) == (first.result_ref, first.result_hash)
    assert again.replayed is True
    assert len(sim.ledger()) == 1


def test_execute_fails_retryable_rate_limited_with_retry_after_when_provider_returns_429(
    sim, adapter
):
    sim.set_faults(rate_limit_next=1, retry_after_s=2)
    outcome = adapter.execute(refund_request())
    assert isinstance(outcome, ToolFailed)
    assert (outcome.error_class, outcome.retryable) == (ErrorClass.RATE_LIMITED, True)
    assert (outcome.http_status, outcome.retry_after_ms) == (429, 2000)
    assert sim.ledger() == []
    assert isinstance(adapter.execute(refund_request(attempt=2)), ToolCompleted)


@pytest.mark.parametrize("status", [500, 503])
def test_execute_fails_retryable_transient_when_provider_returns_5xx(sim, adapter, status):
    sim.set_faults(error_next=2, error_status=status)
    for attempt in (1, 2):
        outcome = adapter.execute(refund_request(attempt=attempt))
        assert isinstance(outcome, ToolFailed)
        assert (outcome.error_class, outcome.retryable, outcome.http_status) == (
            ErrorClass.TRANSIENT, True, status)
    assert sim.ledger() == []
    assert isinstance(adapter.execute(refund_request(attempt=3)), ToolCompleted)
    assert len(sim.ledger()) == 1


def test_execute_is_unknown_and_lookup_finds_refund_when_response_is_dropped(sim, adapter):
    sim.set_faults(accept_then_drop_next=1)
    request = refund_request()
    outcome = adapter.execute(request)
    assert isinstance(outcome, ToolUnknown)
    found = adapter.lookup(request.external_request_id)
    assert isinstance(found, FoundCompleted)
    assert found.result_ref == sim.ledger()[0].refund_id
    assert found.verification is Verification.CONFIRMED_SUCCESS
    assert len(sim.ledger()) == 1


def test_redispatch_with_same_key_replays_refund_when_dropped_response_was_reconciled(
    sim, adapter
):
    sim.set_faults(accept_then_drop_next=1)
    assert isinstance(adapter.execute(refund_request()), ToolUnknown)
    found = adapter.lookup("xr-1-1")
    again = adapter.execute(refund_request(attempt=2))
    assert isinstance(found, FoundCompleted) and isinstance(again, ToolCompleted)
    assert (again.result_ref, again.result_hash) == (found.result_ref, found.result_hash)
    assert isinstance(adapter.lookup("xr-1-2"), FoundCompleted)
    assert len(sim.ledger()) == 1


def test_execute_is_unknown_when_read_times_out_after_provider_executed(sim):
    sim.set_faults(latency_ms=600)
    slow_reader = adapter_for(sim.url, read_timeout_ms=150)
    outcome = slow_reader.execute(refund_request())
    assert isinstance(outcome, ToolUnknown)
    assert "TimeoutError" in outcome.reason
    deadline = time.monotonic() + 5
    while not sim.ledger() and time.monotonic() < deadline:
        time.sleep(0.01)
    assert len(sim.ledger()) == 1


def test_lookup_is_retryable_unknown_when_read_times_out(sim):
    sim.set_faults(latency_ms=600)
    outcome = adapter_for(sim.url, read_timeout_ms=150).lookup("xr-404")
    assert isinstance(outcome, LookupUnknown) and outcome.retryable is True


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_execute_fails_retryable_when_connection_is_refused_before_send():
    refused = adapter_for(f"http://127.0.0.1:{free_port()}")
    outcome = refused.execute(refund_request())
    assert isinstance(outcome, ToolFailed)
    assert (outcome.error_class, outcome.retryable) == (ErrorClass.TRANSIENT, True)
    assert outcome.code == "ConnectionRefusedError"
    lookup = refused.lookup("xr-1-1")
    assert isinstance(lookup, LookupUnknown) and lookup.retryable is True
    assert refused.cancel("xr-1-1") is False


def test_execute_fails_fenced_without_effect_when_lease_epoch_is_stale(sim, adapter):
    assert isinstance(adapter.execute(refund_request(epoch=3)), ToolCompleted)
    late = adapter.execute(refund_request(epoch=2, attempt=2))
    assert isinstance(late, ToolFailed)
    assert (late.error_class, late.retryable, late.code) == (
        ErrorClass.FENCED, False, "stale_epoch")
    assert isinstance(adapter.lookup("xr-1-2"), NotFound)
    assert len(sim.ledger()) == 1


def test_execute_fails_conflict_when_key_is_reused_with_other_arguments(sim, adapter):
    assert isinstance(adapter.execute(refund_request()), ToolCompleted)
    outcome = adapter.execute(refund_request(amount=2500, attempt=2))
    assert isinstance(outcome, ToolFailed)
    assert (outcome.error_class, outcome.code) == (ErrorClass.CONFLICT, "idempotency_key_reuse")
    assert len(sim.ledger()) == 1


def test_execute_fails_permission_when_api_key_is_wrong(sim):
    outcome = adapter_for(sim.url, key="sk_wrong").execute(refund_request())
    assert isinstance(outcome, ToolFailed)
    assert (outcome.error_class, outcome.retryable, outcome.http_status) == (
        ErrorClass.PERMISSION, False, 401)
    assert sim.ledger() == []


@pytest.mark.parametrize(
    "arguments",
    [{"orderId": "o", "amountMinor": "19.99", "currency": "EUR"},
     {"orderId": "o", "amountMinor": 10, "currency": "euro"},
     {"orderId": "o", "amountMinor": 10}],
)
def test_execute_fails_validation_without_sending_when_arguments_are_invalid(
    sim, adapter, arguments
):
    request = refund_request().model_copy(update={"arguments": arguments})
    outcome = adapter.execute(request)
    assert isinstance(outcome, ToolFailed)
    assert (outcome.error_class, outcome.code) == (ErrorClass.VALIDATION, "invalid_arguments")
    assert isinstance(adapter.lookup(request.external_request_id), NotFound)


def test_execute_fails_refused_and_lookup_finds_failure_when_provider_declines(sim, adapter):
    outcome = adapter.execute(refund_request(amount=60_000))
    assert isinstance(outcome, ToolFailed)
    assert (outcome.error_class, outcome.code, outcome.retryable) == (
        ErrorClass.REFUSED, "refund_declined", False)
    found = adapter.lookup("xr-1-1")
    assert isinstance(found, FoundFailed) and found.error_class is ErrorClass.REFUSED
    assert sim.ledger() == []


def test_lookup_finds_refund_when_external_request_id_needs_url_quoting(sim, adapter):
    request = refund_request().model_copy(update={"external_request_id": "run 7/tc#1?x=é"})
    assert isinstance(adapter.execute(request), ToolCompleted)
    assert isinstance(adapter.lookup("run 7/tc#1?x=é"), FoundCompleted)
    assert isinstance(adapter.lookup("run 7/tc#1"), NotFound)


def test_lookup_is_not_found_when_request_never_reached_provider(adapter):
    assert isinstance(adapter.lookup("xr-never-sent"), NotFound)


def test_lookup_confirms_success_when_pending_refund_is_settled(sim, adapter):
    sim.set_faults(pending=True)
    outcome = adapter.execute(refund_request())
    assert isinstance(outcome, ToolCompleted)
    assert outcome.verification is Verification.PENDING
    assert sim.settle(outcome.result_ref, "succeeded").status == 200
    found = adapter.lookup("xr-1-1")
    assert isinstance(found, FoundCompleted)
    assert (found.verification, found.result_hash) == (
        Verification.CONFIRMED_SUCCESS, outcome.result_hash)


def test_cancel_cancels_refund_when_it_is_pending(sim, adapter):
    sim.set_faults(pending=True)
    adapter.execute(refund_request())
    assert adapter.cancel("xr-1-1") is True
    assert adapter.cancel("xr-1-1") is True
    found = adapter.lookup("xr-1-1")
    assert isinstance(found, FoundCompleted)
    assert (found.provider_status, found.verification) == (
        "canceled", Verification.CONFIRMED_FAILURE)
    assert [r.status for r in sim.ledger()] == ["canceled"]


def test_cancel_returns_false_when_refund_already_succeeded_or_is_unknown(sim, adapter):
    adapter.execute(refund_request())
    assert adapter.cancel("xr-1-1") is False
    assert adapter.cancel("xr-unknown") is False
    assert [r.status for r in sim.ledger()] == ["succeeded"]


def test_adapter_settings_read_api_key_from_environment_when_not_given(sim, monkeypatch):
    monkeypatch.setenv("RUNFACTS_PAYMENT_API_KEY", KEY)
    monkeypatch.setenv("RUNFACTS_PAYMENT_URL", sim.url)
    outcome = RefundAdapter(RefundAdapterSettings()).execute(refund_request())
    assert isinstance(outcome, ToolCompleted)


def test_adapter_settings_read_api_key_from_secret_file_when_configured(sim, tmp_path, monkeypatch):
    monkeypatch.delenv("RUNFACTS_PAYMENT_API_KEY", raising=False)
    secret = tmp_path / "payment.key"
    secret.write_text(KEY + "\n")
    settings = RefundAdapterSettings(url=sim.url, api_key_file=secret)
    assert isinstance(RefundAdapter(settings).execute(refund_request()), ToolCompleted)


def test_adapter_raises_config_error_naming_setting_when_api_key_is_missing(monkeypatch):
    monkeypatch.delenv("RUNFACTS_PAYMENT_API_KEY", raising=False)
    monkeypatch.delenv("RUNFACTS_PAYMENT_API_KEY_FILE", raising=False)
    with pytest.raises(ConfigError, match="RUNFACTS_PAYMENT_API_KEY"):
        RefundAdapter(RefundAdapterSettings(url="http://127.0.0.1:1"))


def test_adapter_raises_config_error_naming_url_when_url_is_not_http():
    with pytest.raises(ConfigError, match="ftp://x"):
        RefundAdapter(RefundAdapterSettings(url="ftp://x", api_key=KEY))


def test_tool_failed_rejects_retryable_flag_when_it_contradicts_error_class():
    with pytest.raises(ValueError, match="contradicts"):
        ToolFailed(error_class=ErrorClass.VALIDATION, retryable=True, code="x")
    with pytest.raises(ValueError, match="ToolUnknown"):
        ToolFailed.of(ErrorClass.UNKNOWN_OUTCOME, "x")


def test_tool_request_round_trips_through_camel_case_json():
    request = refund_request()
    data = request.model_dump(by_alias=True)
    assert {"toolCallId", "idempotencyKey", "externalRequestId", "leaseEpoch"} <= set(data)
    assert ToolRequest.model_validate(data) == request


def test_slow_provider_still_answers_within_read_timeout(sim, adapter):
    sim.set_faults(latency_ms=100)
    started = time.monotonic()
    assert isinstance(adapter.execute(refund_request()), ToolCompleted)
    assert time.monotonic() - started >= 0.1


def test_lookup_returns_the_same_result_value_as_execute_when_a_response_was_dropped(sim, adapter):
    done = adapter.execute(refund_request())
    sim.set_faults(accept_then_drop_next=1)
    lost = refund_request(2)
    assert isinstance(adapter.execute(lost), ToolUnknown)
    found = adapter.lookup(lost.external_request_id)
    assert isinstance(done, ToolCompleted) and isinstance(found, FoundCompleted)
    assert json.loads(done.result)["refundId"] == done.result_ref
    assert json.loads(found.result)["refundId"] == found.result_ref != done.result_ref
    assert set(json.loads(found.result)) == set(json.loads(done.result))
