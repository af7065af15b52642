"""Every runfacts producer pins Kafka's default (Java) partitioner, murmur2 (issue 33 item 6).

librdkafka's own default (consistent_random) hashes keys with CRC32: a run's commands would land
on a partition whose task does not own the run, and the decider dead-letters them. So every
producer config runfacts builds says `partitioner=murmur2_random`, an override is refused, and
every `Producer(...)` in product code takes such a config."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from runfacts.connectors.relay.publisher import PublisherSettings
from runfacts.partitioning import PARTITIONER, pin_partitioner
from runfacts.processors.engine.api import Application
from runfacts.processors.engine.settings import EngineSettings, producer_config
from runfacts.schemas.errors import ConfigError
from runfacts.settings import KafkaSettings

ROOT = Path(__file__).resolve().parents[3]
PRODUCT = ("runfacts", "processors", "projections", "connectors")
PINNED_BY = ("producer_config(", "pin_partitioner(", "PRODUCER_PARTITIONING")
ENGINE_CONFIGS = {"pconf", "self._pconf"}
"""The engine's transactional producer: `pconf` is `producer_config(app, settings)`, tested below."""


def _app() -> Application:
    from runfacts.processors.engine.api import Source
    return Application(name="probe", sources=(Source("probe.in"),), process=lambda r, c: None)


def test_every_producer_config_pins_murmur2_when_built_by_runfacts() -> None:
    configs = {
        "client sender, CLI and console command clients, dlq redrive, privacy keys, replay sinks, runscript":
            KafkaSettings().producer_config(**{"enable.idempotence": True}),
        "engine (decider, dispatcher, projectors)": producer_config(_app(), EngineSettings()),
        "outbox relay": PublisherSettings(bootstrap="127.0.0.1:9092", transactional_id="relay-1").producer_config(),
    }
    assert {name: c["partitioner"] for name, c in configs.items()} == dict.fromkeys(configs, PARTITIONER)


def test_partitioner_override_is_refused_when_it_would_misplace_runs() -> None:
    with pytest.raises(ConfigError, match="RUNFACTS_KAFKA_CONFIG.partitioner.*murmur2_random"):
        KafkaSettings(config={"partitioner": "consistent_random"}).producer_config()
    with pytest.raises(ConfigError, match="RUNFACTS_PRODUCER.partitioner"):
        producer_config(_app(), EngineSettings(producer={"partitioner": "consistent_random"}))
    with pytest.raises(ConfigError, match="relay producer config.partitioner"):
        PublisherSettings(bootstrap="b", transactional_id="t", config={"partitioner": "random"}).producer_config()
    assert pin_partitioner({"partitioner": PARTITIONER}, "x") == {"partitioner": PARTITIONER}


def _producer_calls() -> list[tuple[str, int, str]]:
    """(file, line, argument source) of every `Producer(...)` in product code."""
    found = []
    for package in PRODUCT:
        for path in sorted((ROOT / package).rglob("*.py")):
            source = path.read_text(encoding="utf-8")
            for node in ast.walk(ast.parse(source)):
                if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "Producer":
                    args = ", ".join(ast.get_source_segment(source, a) or "" for a in node.args)
                    found.append((str(path.relative_to(ROOT)), node.lineno, args))
    return found


def test_every_producer_in_product_code_takes_a_pinned_config() -> None:
    calls = _producer_calls()
    assert len(calls) >= 10, calls  # the scan sees the producers (client, ops, relay, engine, ...)
    unpinned = [c for c in calls if c[2] not in ENGINE_CONFIGS and not any(t in c[2] for t in PINNED_BY)]
    assert unpinned == [], "build the config with KafkaSettings.producer_config or pin_partitioner"
