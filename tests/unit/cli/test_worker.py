"""`runfacts worker ...`: the broker comes from the shared Kafka settings (RUNFACTS_KAFKA_*), and only from them."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from runfacts.cli import app
from runfacts.cli.platform.worker import FACTORIES, engine_settings
from runfacts.processors.engine.settings import load_settings
from runfacts.schemas.errors import ConfigError

runner = CliRunner()
ENGINE_VARS = ("RUNFACTS_BOOTSTRAP_SERVERS", "RUNFACTS_KAFKA", "RUNFACTS_KAFKA_CONFIG",
               "RUNFACTS_KAFKA_BOOTSTRAP_SERVERS", "KAFKA_BOOTSTRAP_SERVERS")


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ENGINE_VARS:
        monkeypatch.delenv(name, raising=False)


def test_worker_engine_uses_the_shared_kafka_settings_when_engine_variables_are_unset(monkeypatch):
    monkeypatch.setenv("RUNFACTS_KAFKA_BOOTSTRAP_SERVERS", "kafka:9092")
    monkeypatch.setenv("RUNFACTS_KAFKA_CONFIG", '{"security.protocol": "SASL_SSL"}')

    settings = engine_settings()

    assert settings.bootstrap_servers == "kafka:9092"
    assert settings.kafka == {"security.protocol": "SASL_SSL"}


@pytest.mark.parametrize(("old", "new"), [("RUNFACTS_BOOTSTRAP_SERVERS", "RUNFACTS_KAFKA_BOOTSTRAP_SERVERS"),
                                          ("RUNFACTS_KAFKA", "RUNFACTS_KAFKA_CONFIG")])
def test_worker_engine_refuses_the_old_broker_variables_when_they_are_set(monkeypatch, old, new):
    monkeypatch.setenv("RUNFACTS_KAFKA_BOOTSTRAP_SERVERS", "kafka:9092")
    monkeypatch.setenv(old, "broker-a:9093")

    with pytest.raises(ConfigError, match=f"{old}=.*no longer read: set {new}"):
        engine_settings()
    with pytest.raises(ConfigError, match=old):
        load_settings()


def test_worker_refuses_to_start_and_names_the_replacement_when_an_old_variable_is_set(monkeypatch):
    monkeypatch.setenv("RUNFACTS_BOOTSTRAP_SERVERS", "broker-a:9093")
    monkeypatch.setattr("runfacts.cli.platform.worker.run", lambda *a: pytest.fail("the worker started"))

    result = runner.invoke(app, ["worker", "projector"])

    assert result.exit_code != 0
    assert isinstance(result.exception, ConfigError)
    assert "set RUNFACTS_KAFKA_BOOTSTRAP_SERVERS" in str(result.exception)


@pytest.mark.parametrize("kind", sorted(FACTORIES))
def test_worker_runs_the_factory_of_its_kind_when_invoked(kind: str, monkeypatch):
    seen: dict[str, object] = {}

    def fake_run(spec: str, pairs: list[str], settings: object) -> int:
        seen.update(spec=spec, pairs=pairs)
        return 0
    monkeypatch.setattr("runfacts.cli.platform.worker.run", fake_run)
    extra = ["--args-store", "/tmp/h.db"] if kind == "dispatcher" else []

    result = runner.invoke(app, ["worker", kind, "--prefix", "p1", *extra])

    assert result.exit_code == 0, result.output
    assert seen["spec"] == FACTORIES[kind]
    assert "prefix=p1" in seen["pairs"]  # type: ignore[operator]


def test_worker_factories_build_applications_when_loaded(tmp_path, monkeypatch):
    from runfacts.processors.engine.worker import load_app

    monkeypatch.setenv("RUNFACTS_STATE_DIR", str(tmp_path))
    monkeypatch.setenv("RUNFACTS_PAYMENT_API_KEY", "k-test")
    names = {kind: load_app(spec, {"prefix": "p1", **({"args_store": str(tmp_path / "h.db")}
                                                      if kind == "dispatcher" else {})}).name
             for kind, spec in FACTORIES.items()}

    assert names == {"decider": "p1-run-decider", "dispatcher": "p1-dispatcher", "projector": "p1-projector",
                     "memory": "p1-projector-memory"}
