"""compose.yaml and scripts/kafka.sh must run the broker with the same settings."""

from __future__ import annotations

from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[2]
# Settings that legitimately differ per environment (addresses, paths, JVM heap).
PER_ENVIRONMENT = {
    "KAFKA_LISTENERS", "KAFKA_ADVERTISED_LISTENERS", "KAFKA_CONTROLLER_QUORUM_VOTERS",
    "KAFKA_LOG_DIRS", "KAFKA_HEAP_OPTS",
}


def _script_settings() -> dict[str, str]:
    settings = {}
    for line in (REPO / "scripts/kafka/broker.properties").read_text().splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            key, _, value = line.partition("=")
            settings["KAFKA_" + key.upper().replace(".", "_")] = value
    return settings


def _compose_settings() -> dict[str, str]:
    compose = yaml.safe_load((REPO / "compose.yaml").read_text())
    env = compose["services"]["kafka"]["environment"]
    return {k: str(v) for k, v in env.items() if k not in PER_ENVIRONMENT}


def test_compose_broker_settings_equal_script_settings_when_compared() -> None:
    assert _compose_settings() == _script_settings()


def test_compose_broker_heap_equals_script_default_when_compared() -> None:
    compose = yaml.safe_load((REPO / "compose.yaml").read_text())
    script = (REPO / "scripts/kafka.sh").read_text()
    assert 'heap="${KAFKA_HEAP:-512m}"' in script
    assert compose["services"]["kafka"]["environment"]["KAFKA_HEAP_OPTS"] == "-Xms512m -Xmx512m"
