"""Issue 18.2 and 18.4 without a broker: the timeouts a zombie needs refused at start-up, the
instance id stable across restarts, the producer renewed after a timed-out transaction call."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from confluent_kafka import KafkaError, KafkaException

from runfacts.dev.apps import counter_app
from runfacts.processors.engine.commit import ExactlyOnce, ProducerFenced, call, must_renew_producer, renewal_needed
from runfacts.processors.engine.runner import FENCING_LOOP, Engine, note_fencing
from runfacts.processors.engine.settings import (
    INSTANCE_ID_FILE,
    EngineSettings,
    check_timeouts,
    load_settings,
    producer_config,
    stable_instance_id,
)
from runfacts.schemas.errors import ConfigError, InfrastructureError

APP = counter_app(name="zmb")


def test_start_up_is_refused_naming_both_settings_when_transaction_timeout_reaches_the_session() -> None:
    settings = EngineSettings(transaction_timeout_ms=10_000, consumer={"session.timeout.ms": 6_000})
    with pytest.raises(ConfigError, match="RUNFACTS_TRANSACTION_TIMEOUT_MS=10000.*session.timeout.ms \\(6000 ms"):
        check_timeouts(settings)
    with pytest.raises(ConfigError, match="session.timeout.ms"):
        Engine(APP, settings)  # settings built directly are checked too


def test_timeouts_pass_when_the_transaction_ends_before_the_session() -> None:
    check_timeouts(EngineSettings(transaction_timeout_ms=5_000, consumer={"session.timeout.ms": 6_000}))
    check_timeouts(EngineSettings(transaction_timeout_ms=10_000))  # librdkafka's 45 s session
    check_timeouts(EngineSettings(guarantee="at_least_once", transaction_timeout_ms=60_000,
                                  consumer={"session.timeout.ms": 6_000}))  # no transactions


def test_load_settings_refuses_when_the_environment_sets_a_transaction_timeout_past_the_session(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RUNFACTS_TRANSACTION_TIMEOUT_MS", "45000")
    with pytest.raises(ConfigError, match="must be below the consumer's session.timeout.ms \\(45000 ms"):
        load_settings()


def test_session_timeout_is_refused_when_it_is_not_a_number() -> None:
    with pytest.raises(ConfigError, match="RUNFACTS_CONSUMER.session.timeout.ms"):
        check_timeouts(EngineSettings(consumer={"session.timeout.ms": "soon"}))


def test_instance_id_is_the_persisted_one_when_the_process_restarts_on_its_state_dir(tmp_path: Path) -> None:
    first = stable_instance_id(EngineSettings(state_dir=tmp_path))
    again = stable_instance_id(EngineSettings(state_dir=tmp_path))  # a restart: a new process, same dir

    assert first == again == (tmp_path / INSTANCE_ID_FILE).read_text().strip()
    assert producer_config(APP, EngineSettings(state_dir=tmp_path))["transactional.id"] == f"zmb-{first}"
    assert Engine(APP, EngineSettings(state_dir=tmp_path)).settings.instance_id == first
    assert stable_instance_id(EngineSettings(state_dir=tmp_path / "other")) != first


def test_instance_id_is_the_environments_when_runfacts_instance_id_is_set(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RUNFACTS_INSTANCE_ID", "pod-3")
    settings = load_settings(state_dir=tmp_path)

    assert stable_instance_id(settings) == "pod-3"
    assert not (tmp_path / INSTANCE_ID_FILE).exists()


def test_instance_id_file_is_refused_naming_the_fix_when_empty(tmp_path: Path) -> None:
    (tmp_path / INSTANCE_ID_FILE).write_text("\n")
    with pytest.raises(ConfigError, match="is empty: delete it"):
        stable_instance_id(EngineSettings(state_dir=tmp_path))


@pytest.mark.parametrize("step, code, renew", [
    ("commit_transaction", KafkaError._TIMED_OUT, True),
    ("abort_transaction", KafkaError._TIMED_OUT, True),
    ("send_offsets_to_transaction", KafkaError.REQUEST_TIMED_OUT, True),
    ("commit_transaction", KafkaError._TIMED_OUT_QUEUE, True),
    ("commit_transaction", KafkaError._FENCED, False),  # fenced: stop, never renew
    ("commit_transaction", KafkaError._STATE, False),
    ("begin_transaction", KafkaError._TIMED_OUT, False),  # nothing of it can land later
    ("init_transactions", KafkaError._TIMED_OUT, False),
    ("", None, False),
])
def test_producer_is_renewed_only_when_a_transaction_end_timed_out(step: str, code: int | None, renew: bool) -> None:
    assert must_renew_producer(step, code) is renew


def test_producer_is_renewed_when_it_was_wedged() -> None:
    assert must_renew_producer("send_offsets_to_transaction", None, wedged=True)


def _failing(name: str, error: KafkaError):
    def fn(*_: object) -> None:
        raise KafkaException(error)
    fn.__name__ = name
    return fn


def test_timed_out_commit_asks_for_a_new_producer_when_retries_run_out() -> None:
    with pytest.raises(InfrastructureError) as raised:
        call(_failing("commit_transaction", KafkaError(KafkaError._TIMED_OUT, "EndTxn", retriable=True)))

    assert renewal_needed(raised.value)
    assert not renewal_needed(ValueError("not a Kafka error"))


def test_fenced_call_is_a_producer_fenced_error_when_the_broker_says_so() -> None:
    with pytest.raises(ProducerFenced):
        call(_failing("commit_transaction", KafkaError(KafkaError._FENCED, "fenced", fatal=True)))


def test_fencings_are_counted_within_the_window_when_noted(tmp_path: Path) -> None:
    path = tmp_path / "fencings"
    assert [note_fencing(path, t, 600) for t in (1000.0, 1100.0, 1500.0)] == [1, 2, 3]
    assert note_fencing(path, 2200.0, 600) == 1  # the older ones fell out of the window


def test_repeated_fencing_is_named_as_two_live_instances_sharing_an_id_when_it_loops(tmp_path: Path) -> None:
    clock = iter([100.0, 200.0, 300.0])
    engine = Engine(APP, EngineSettings(state_dir=tmp_path, instance_id="pod-1"), clock=lambda: next(clock))
    fenced = ProducerFenced("commit_transaction failed: fenced")
    first, second, third = (str(engine._fenced(fenced)) for _ in range(3))

    assert "another process started with this instance id 'pod-1'" in first and "share" not in second
    assert f"fenced {FENCING_LOOP} times" in third
    assert "two live instances share the instance id 'pod-1'" in third and "RUNFACTS_INSTANCE_ID" in third


def test_fencing_with_a_transaction_open_past_its_timeout_names_the_timeout_not_another_process(tmp_path: Path) -> None:
    engine = Engine(APP, EngineSettings(state_dir=tmp_path, instance_id="pod-1", transaction_timeout_ms=10_000),
                    clock=lambda: 100.0)
    txn = engine._txn = ExactlyOnce(consumer=None)  # type: ignore[arg-type]
    txn.open, txn.opened_at = True, time.monotonic() - 25  # a starved process: a transaction open 25 s
    message = str(engine._fenced(ProducerFenced("commit_transaction failed: fenced")))

    assert "open for 25.0 s, past its transaction timeout (RUNFACTS_TRANSACTION_TIMEOUT_MS=10000)" in message
    assert "another process" not in message and "the broker aborted the open transaction" in message
    txn.opened_at = time.monotonic()  # begun just now: a fencing is another process
    assert "another process started with this instance id 'pod-1'" in str(engine._fenced(ProducerFenced("x")))
    txn.open, txn.opened_at = False, time.monotonic() - 25  # idle, no transaction open: another process too
    assert "another process started with this instance id 'pod-1'" in str(engine._fenced(ProducerFenced("x")))
    assert (tmp_path / "fencings").read_text().count("\n") == 2  # the timed-out one is not counted


def test_producer_error_past_the_transaction_timeout_names_the_timeout_not_the_broker(tmp_path: Path) -> None:
    """After a pause the client may time the transaction out itself (no fencing: "message(s) timed
    out ... requires epoch bump", then produce fails in a bad state); seen on the broker by
    tests/integration/test_engine_pause_fencing.py, it was reported as a broker that might be down."""
    engine = Engine(APP, EngineSettings(state_dir=tmp_path, instance_id="pod-1", transaction_timeout_ms=1_000))
    txn = engine._txn = ExactlyOnce(consumer=None)  # type: ignore[arg-type]
    txn.open, txn.opened_at = True, time.monotonic() - 12
    bad_state = KafkaException(KafkaError(KafkaError._STATE, "Unable to produce message"))

    timed_out = engine._timed_out(bad_state)
    assert timed_out is not None and timed_out.retryable
    assert "past its transaction timeout (RUNFACTS_TRANSACTION_TIMEOUT_MS=1000)" in str(timed_out)
    txn.opened_at = time.monotonic()  # a transaction just begun: not this cause
    assert engine._timed_out(bad_state) is None
    assert engine._timed_out(ValueError("not Kafka")) is None
