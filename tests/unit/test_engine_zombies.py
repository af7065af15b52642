"""Issue 18.2 and 18.4 without a broker: the timeouts a zombie needs refused at start-up, the
instance id stable across restarts, the producer renewed after a timed-out transaction call."""

from __future__ import annotations

from pathlib import Path

import pytest

from runfacts.dev.apps import counter_app
from runfacts.processors.engine.runner import Engine
from runfacts.processors.engine.settings import (
    INSTANCE_ID_FILE,
    EngineSettings,
    check_timeouts,
    load_settings,
    producer_config,
    stable_instance_id,
)
from runfacts.schemas.errors import ConfigError

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
