"""Error classification, retry decisions and idempotency keys (pure, deterministic)."""

from __future__ import annotations

import pytest

from runfacts.processors.policy.retry import (
    ErrorClass,
    GiveUp,
    GiveUpReason,
    Observation,
    Phase,
    Retry,
    RetryPolicy,
    args_hash,
    backoff_ms,
    classify,
    classify_status,
    idempotency_key,
    is_retryable,
    next_retry,
)

POLICY = RetryPolicy(max_attempts=4, base_backoff_ms=200, max_backoff_ms=5000, deadline_ms=30_000)
T0 = 1_700_000_000_000


@pytest.mark.parametrize(
    ("status", "code", "expected"),
    [
        (400, "invalid_request", ErrorClass.VALIDATION),
        (422, "", ErrorClass.VALIDATION),
        (401, "unauthorized", ErrorClass.PERMISSION),
        (403, "", ErrorClass.PERMISSION),
        (409, "idempotency_key_reuse", ErrorClass.CONFLICT),
        (409, "stale_epoch", ErrorClass.FENCED),
        (402, "refund_declined", ErrorClass.REFUSED),
        (404, "", ErrorClass.REFUSED),
        (408, "", ErrorClass.TRANSIENT),
        (429, "rate_limited", ErrorClass.RATE_LIMITED),
        (500, "", ErrorClass.TRANSIENT),
        (502, "", ErrorClass.TRANSIENT),
        (503, "", ErrorClass.TRANSIENT),
        (504, "", ErrorClass.TRANSIENT),
        (501, "", ErrorClass.PROVIDER),
        (505, "", ErrorClass.PROVIDER),
    ],
)
def test_classify_status_gives_class_when_provider_answers(status, code, expected):
    assert classify(Observation(Phase.AFTER_SEND, status, code), side_effect=True) is expected


@pytest.mark.parametrize("status", [200, 302, 399, 600])
def test_classify_status_raises_when_status_is_not_an_error(status):
    with pytest.raises(ValueError, match=str(status)):
        classify_status(status)


@pytest.mark.parametrize("side_effect", [True, False])
def test_classify_transport_is_transient_when_failure_happened_before_send(side_effect):
    observed = Observation(Phase.BEFORE_SEND, code="ConnectionRefusedError")
    assert classify(observed, side_effect=side_effect) is ErrorClass.TRANSIENT


def test_classify_transport_is_unknown_outcome_when_effect_request_was_written():
    observed = Observation(Phase.AFTER_SEND, code="TimeoutError")
    assert classify(observed, side_effect=True) is ErrorClass.UNKNOWN_OUTCOME


def test_classify_transport_is_transient_when_read_only_call_times_out_after_send():
    observed = Observation(Phase.AFTER_SEND, code="TimeoutError")
    assert classify(observed, side_effect=False) is ErrorClass.TRANSIENT


@pytest.mark.parametrize(
    ("error", "expected"),
    [(c, c in {ErrorClass.TRANSIENT, ErrorClass.RATE_LIMITED}) for c in ErrorClass],
)
def test_is_retryable_only_for_transient_and_rate_limited(error, expected):
    assert is_retryable(error) is expected


def test_next_retry_backs_off_within_equal_jitter_bounds_when_error_is_transient():
    for attempt, cap in [(1, 200), (2, 400), (3, 800)]:
        decision = next_retry(POLICY, attempt, T0, T0, ErrorClass.TRANSIENT, jitter_seed="tc-1")
        assert isinstance(decision, Retry)
        assert cap // 2 <= decision.delay_ms <= cap
        assert decision.retry_at_ms == T0 + decision.delay_ms
        assert decision.next_attempt == attempt + 1


def test_next_retry_is_identical_when_inputs_are_identical():
    args = (POLICY, 2, T0 + 500, T0, ErrorClass.TRANSIENT)
    assert next_retry(*args, jitter_seed="tc-1") == next_retry(*args, jitter_seed="tc-1")


def test_next_retry_jitter_differs_when_seeds_differ():
    delays = {backoff_ms(POLICY, 3, f"tc-{n}") for n in range(20)}
    assert len(delays) > 10
    assert all(400 <= d <= 800 for d in delays)


def test_backoff_is_capped_by_max_backoff_when_attempts_grow():
    policy = POLICY.model_copy(update={"max_attempts": 100})
    assert 2500 <= backoff_ms(policy, 90, "s") <= 5000


def test_next_retry_waits_for_retry_after_when_rate_limited():
    decision = next_retry(POLICY, 1, T0, T0, ErrorClass.RATE_LIMITED, retry_after_ms=3000)
    assert decision == Retry(retry_at_ms=T0 + 3000, delay_ms=3000, next_attempt=2)


def test_next_retry_gives_up_max_attempts_when_last_attempt_failed():
    decision = next_retry(POLICY, 4, T0 + 10, T0, ErrorClass.TRANSIENT)
    assert isinstance(decision, GiveUp)
    assert decision.reason is GiveUpReason.MAX_ATTEMPTS


def test_next_retry_gives_up_deadline_when_retry_would_land_after_deadline():
    decision = next_retry(POLICY, 2, T0 + 29_900, T0, ErrorClass.TRANSIENT, jitter_seed="x")
    assert isinstance(decision, GiveUp)
    assert decision.reason is GiveUpReason.DEADLINE


def test_next_retry_gives_up_deadline_when_retry_after_exceeds_deadline():
    decision = next_retry(POLICY, 1, T0, T0, ErrorClass.RATE_LIMITED, retry_after_ms=31_000)
    assert isinstance(decision, GiveUp)
    assert decision.reason is GiveUpReason.DEADLINE


def test_next_retry_reconciles_instead_of_retrying_when_outcome_is_unknown():
    decision = next_retry(POLICY, 1, T0, T0, ErrorClass.UNKNOWN_OUTCOME)
    assert isinstance(decision, GiveUp)
    assert decision.reason is GiveUpReason.RECONCILE


@pytest.mark.parametrize(
    "error",
    [ErrorClass.VALIDATION, ErrorClass.PERMISSION, ErrorClass.CONFLICT, ErrorClass.FENCED,
     ErrorClass.REFUSED, ErrorClass.PROVIDER],
)
def test_next_retry_gives_up_not_retryable_when_error_is_permanent(error):
    decision = next_retry(POLICY, 1, T0, T0, error)
    assert isinstance(decision, GiveUp)
    assert decision.reason is GiveUpReason.NOT_RETRYABLE
    assert str(error) in decision.detail


@pytest.mark.parametrize(("attempt", "now"), [(0, T0), (1, T0 - 1)])
def test_next_retry_raises_when_attempt_or_clock_is_invalid(attempt, now):
    with pytest.raises(ValueError):
        next_retry(POLICY, attempt, now, T0, ErrorClass.TRANSIENT)


def test_retry_policy_rejects_max_backoff_below_base():
    with pytest.raises(ValueError, match="maxBackoffMs=10"):
        RetryPolicy(max_attempts=2, base_backoff_ms=100, max_backoff_ms=10, deadline_ms=1000)


def test_args_hash_is_equal_when_key_order_and_whitespace_differ():
    a = {"orderId": "order-001", "amountMinor": 1999, "currency": "EUR", "meta": {"b": 1, "a": 2}}
    b = {"meta": {"a": 2, "b": 1}, "currency": "EUR", "amountMinor": 1999, "orderId": "order-001"}
    assert args_hash(a) == args_hash(b)
    assert len(args_hash(a)) == 64


def test_args_hash_changes_when_any_argument_changes():
    base = {"orderId": "order-001", "amountMinor": 1999}
    assert args_hash(base) != args_hash({**base, "amountMinor": 2000})


def test_args_hash_is_sha256_of_canonical_json():
    import hashlib

    expected = hashlib.sha256(b'{"a":[1,"\xc3\xa9"],"b":null}').hexdigest()
    assert args_hash({"b": None, "a": [1, "é"]}) == expected


@pytest.mark.parametrize("bad", [{"x": float("nan")}, {"x": object()}, ["not", "a", "dict"]])
def test_args_hash_raises_when_arguments_are_not_canonical_json(bad):
    with pytest.raises(ValueError):
        args_hash(bad)


def test_idempotency_key_is_stable_and_readable_when_inputs_repeat():
    h = args_hash({"orderId": "order-001", "amountMinor": 1999})
    key = idempotency_key("run-1", "refund", "order-001", h)
    assert key == idempotency_key("run-1", "refund", "order-001", h)
    action, target, digest = key.split(":")
    assert (action, target, len(digest)) == ("refund", "order-001", 24)


def test_idempotency_key_changes_when_arguments_or_run_change():
    h1 = args_hash({"amountMinor": 1999})
    h2 = args_hash({"amountMinor": 2000})
    key = idempotency_key("run-1", "refund", "order-001", h1)
    assert key != idempotency_key("run-1", "refund", "order-001", h2)
    assert key != idempotency_key("run-2", "refund", "order-001", h1)


@pytest.mark.parametrize(
    ("run_id", "action", "target", "digest", "names"),
    [
        ("run-1", "re fund", "order-001", "a" * 64, "action"),
        ("run-1", "refund", "order:001", "a" * 64, "target"),
        ("", "refund", "order-001", "a" * 64, "run_id"),
        ("run-1", "refund", "order-001", "abc", "arguments_hash"),
    ],
)
def test_idempotency_key_raises_naming_input_when_a_part_is_invalid(
    run_id, action, target, digest, names
):
    with pytest.raises(ValueError, match=names):
        idempotency_key(run_id, action, target, digest)
