"""Engine settings, Kafka client configs and the worker's app loading (no broker)."""

from __future__ import annotations

from pathlib import Path

import pytest

from runfacts.dev.apps import counter_app
from runfacts.processors.engine.settings import (
    CONSUMER_FETCH,
    CONSUMER_PREFETCH,
    EngineSettings,
    caught_up_interval,
    commit_due,
    consumer_config,
    load_settings,
    producer_config,
    restore_config,
)
from runfacts.processors.engine.worker import load_app, parse_params, run
from runfacts.schemas.errors import ConfigError

APP = counter_app(name="cfg")


def test_consumer_config_raises_config_error_when_assignor_is_cooperative() -> None:
    settings = EngineSettings(consumer={"partition.assignment.strategy": "cooperative-sticky"})
    with pytest.raises(ConfigError, match="partition.assignment.strategy"):
        consumer_config(APP, settings)


def test_configs_pass_librdkafka_options_through_when_given() -> None:
    settings = EngineSettings(kafka={"security.protocol": "SASL_SSL", "sasl.mechanism": "PLAIN"},
                              producer={"linger.ms": 20}, consumer={"fetch.wait.max.ms": 50})
    consumer, producer = consumer_config(APP, settings), producer_config(APP, settings)
    assert consumer["security.protocol"] == producer["security.protocol"] == "SASL_SSL"
    assert restore_config(APP, settings)["sasl.mechanism"] == "PLAIN"
    assert (producer["linger.ms"], consumer["fetch.wait.max.ms"]) == (20, 50)


def test_producer_config_is_transactional_per_instance_when_exactly_once() -> None:
    eos = producer_config(APP, EngineSettings(instance_id="w7"))
    alos = producer_config(APP, EngineSettings(instance_id="w7", guarantee="at_least_once"))
    assert eos["transactional.id"] == "cfg-w7"
    assert "transactional.id" not in alos
    assert consumer_config(APP, EngineSettings())["isolation.level"] == "read_committed"


def test_load_settings_names_the_setting_when_env_value_is_invalid(monkeypatch) -> None:
    monkeypatch.setenv("RUNFACTS_COMMIT_INTERVAL_MS", "soon")
    with pytest.raises(ConfigError, match="RUNFACTS_COMMIT_INTERVAL_MS='soon'"):
        load_settings()


def test_load_settings_reads_nested_kafka_options_when_json_in_env(monkeypatch) -> None:
    monkeypatch.delenv("RUNFACTS_KAFKA_PROPERTIES", raising=False)
    monkeypatch.setenv("RUNFACTS_KAFKA_CONFIG", '{"security.protocol": "SSL"}')
    monkeypatch.setenv("RUNFACTS_GUARANTEE", "at_least_once")
    settings = load_settings()
    assert settings.kafka == {"security.protocol": "SSL"}
    assert not settings.exactly_once


def test_load_app_builds_application_when_factory_params_given() -> None:
    app = load_app("runfacts.dev.apps:counter_app", parse_params(["name=x", "idle_ms=5"]))
    assert app.name == "x" and app.on_timer is not None


@pytest.mark.parametrize("spec", ["nocolon", "runfacts.dev.apps:missing", "no.such:f"])
def test_load_app_raises_config_error_when_spec_cannot_load(spec: str) -> None:
    with pytest.raises(ConfigError, match="--app"):
        load_app(spec, {})


def test_worker_exits_2_when_params_are_malformed() -> None:
    assert run("runfacts.dev.apps:counter_app", ["novalue"]) == 2


def test_producer_does_not_compress_unless_configured_to() -> None:
    assert producer_config(APP, EngineSettings())["compression.type"] == "none"
    lz4 = EngineSettings(producer={"compression.type": "lz4"})
    assert producer_config(APP, lz4)["compression.type"] == "lz4"


def test_producer_retries_a_concurrent_transaction_after_5_ms_not_100() -> None:
    """A commit right after the previous one is answered CONCURRENT_TRANSACTIONS while the
    coordinator writes the markers; librdkafka's default 100 ms backoff made that a call's tail."""
    assert producer_config(APP, EngineSettings())["retry.backoff.ms"] == 5
    slower = EngineSettings(producer={"retry.backoff.ms": 100})
    assert producer_config(APP, slower)["retry.backoff.ms"] == 100


ENGINE_DOC = Path(__file__).resolve().parents[3] / "docs" / "engine.md"


def test_memory_defaults_are_the_ones_docs_engine_md_names() -> None:
    doc = " ".join(ENGINE_DOC.read_text().split())
    settings = EngineSettings()
    assert f"(`RUNFACTS_STORE_MEMORY_MB`, {settings.store_memory_mb})" in doc
    assert f"(`RUNFACTS_STORE_CACHE_KEYS`, {settings.store_cache_keys})" in doc
    assert f"(`RUNFACTS_STORE_CACHE_KB`, {settings.store_cache_kb})" in doc
    assert f"`RUNFACTS_HEAP_TRIM_INTERVAL_MS` ({settings.heap_trim_interval_ms};" in doc
    assert f"`RUNFACTS_MALLOC_ARENA_MAX` ({settings.malloc_arena_max}:" in doc
    assert (settings.store_memory_mb, CONSUMER_PREFETCH["queued.max.messages.kbytes"]) == (64, 16_384)
    consumer = consumer_config(APP, settings)
    for key, value in CONSUMER_PREFETCH.items():
        assert consumer[key] == value
        assert f"`{key}` {value}" in doc, f"docs/engine.md does not give {key}'s default {value}"


def test_memory_defaults_yield_to_the_environment_when_overridden(monkeypatch) -> None:
    monkeypatch.delenv("RUNFACTS_KAFKA_PROPERTIES", raising=False)
    monkeypatch.setenv("RUNFACTS_STORE_MEMORY_MB", "32")
    monkeypatch.setenv("RUNFACTS_CONSUMER", '{"queued.max.messages.kbytes": 65536}')
    monkeypatch.setenv("RUNFACTS_KAFKA_CONFIG", '{"fetch.max.bytes": 52428800}')
    settings = load_settings()
    consumer = consumer_config(APP, settings)
    assert settings.store_memory_mb == 32
    assert (consumer["queued.max.messages.kbytes"], consumer["fetch.max.bytes"]) == (65536, 52428800)
    assert consumer["max.partition.fetch.bytes"] == CONSUMER_PREFETCH["max.partition.fetch.bytes"]


def test_fetch_batching_defaults_are_the_ones_docs_engine_md_names_and_yield_to_the_environment(
        monkeypatch) -> None:
    doc = " ".join(ENGINE_DOC.read_text().split())
    consumer = consumer_config(APP, EngineSettings())
    for key, value in CONSUMER_FETCH.items():
        assert consumer[key] == value
        assert f"`{key}` {value}" in doc, f"docs/engine.md does not give {key}'s default {value}"
    monkeypatch.delenv("RUNFACTS_KAFKA_PROPERTIES", raising=False)
    monkeypatch.setenv("RUNFACTS_CONSUMER", '{"fetch.min.bytes": 1, "fetch.wait.max.ms": 500}')
    consumer = consumer_config(APP, load_settings())
    assert (consumer["fetch.min.bytes"], consumer["fetch.wait.max.ms"]) == (1, 500)


def test_the_caught_up_interval_applies_only_with_idle_commits_and_below_the_interval() -> None:
    assert caught_up_interval(EngineSettings()) == 0.005  # the defaults: 5 ms caught up, 100 ms under a backlog
    assert caught_up_interval(EngineSettings(commit_on_idle=False)) == 0.1  # the interval only
    assert caught_up_interval(EngineSettings(commit_interval_caught_up_ms=0)) == 0.1  # off
    assert caught_up_interval(EngineSettings(commit_interval_ms=4)) == 0.004  # never longer than the interval


@pytest.mark.parametrize(("consumed", "since_ms", "quiet", "due"), [
    (0, 0, False, True),      # drained: a loud transaction commits at once (commit_on_idle)
    (3, 4, False, False),     # caught up: not yet 5 ms old
    (3, 5, False, True),      # caught up: 5 ms old
    (250, 50, False, False),  # a backlog (full batch): the 100-ms interval
    (250, 100, False, True),
    (0, 50, True, False),     # quiet: nobody reads it, so neither idle nor caught up commits it
    (3, 99, True, False),
    (3, 100, True, True),     # ... the interval does
])
def test_commit_due_defers_a_quiet_transaction_to_the_interval(consumed: int, since_ms: int, quiet: bool,
                                                                due: bool) -> None:
    assert commit_due(EngineSettings(), 1, consumed, since_ms / 1000, quiet) is due


def test_commit_due_commits_a_quiet_transaction_like_a_loud_one_when_deferring_is_off() -> None:
    off = EngineSettings(defer_quiet_commits=False)
    assert commit_due(off, 1, 0, 0.0, quiet=True)
    assert commit_due(EngineSettings(commit_every=10), 10, 3, 0.0, quiet=True), "commit_every still counts"
