"""Settings: where Kafka is and how librdkafka options pass through."""

from __future__ import annotations

from pathlib import Path

import pytest

from runfacts.schemas.errors import ConfigError
from runfacts.settings import KafkaSettings


def test_client_config_passes_librdkafka_options_through_when_given_as_json(monkeypatch) -> None:
    monkeypatch.setenv("RUNFACTS_KAFKA_CONFIG", '{"security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-512"}')
    monkeypatch.setenv("RUNFACTS_KAFKA_BOOTSTRAP_SERVERS", "b1:9093")
    conf = KafkaSettings().client_config(**{"group.id": "g"})
    assert conf == {"security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-512",
                    "bootstrap.servers": "b1:9093", "group.id": "g"}


def test_client_config_reads_properties_file_when_named(monkeypatch, tmp_path: Path) -> None:
    props = tmp_path / "k.properties"
    props.write_text("# comment\nsecurity.protocol=SSL\nssl.ca.location = /ca.pem\n")
    monkeypatch.setenv("RUNFACTS_KAFKA_PROPERTIES", str(props))
    monkeypatch.delenv("KAFKA_BOOTSTRAP_SERVERS", raising=False)
    conf = KafkaSettings().client_config()
    assert conf["security.protocol"] == "SSL" and conf["ssl.ca.location"] == "/ca.pem"


def test_client_config_names_the_setting_when_properties_file_is_missing(monkeypatch) -> None:
    monkeypatch.setenv("RUNFACTS_KAFKA_PROPERTIES", "/nonexistent/k.properties")
    with pytest.raises(ConfigError, match="RUNFACTS_KAFKA_PROPERTIES='/nonexistent/k.properties'"):
        KafkaSettings().client_config()


def test_settings_reject_zero_partitions_when_configured(monkeypatch) -> None:
    monkeypatch.setenv("RUNFACTS_KAFKA_PARTITIONS", "0")
    with pytest.raises(ConfigError, match="RUNFACTS_KAFKA_PARTITIONS"):
        KafkaSettings()


def test_settings_use_bootstrap_servers_when_given_by_field_name(monkeypatch) -> None:
    monkeypatch.delenv("KAFKA_BOOTSTRAP_SERVERS", raising=False)
    monkeypatch.delenv("RUNFACTS_KAFKA_BOOTSTRAP_SERVERS", raising=False)
    assert KafkaSettings(bootstrap_servers="b2:29092").client_config()["bootstrap.servers"] == "b2:29092"
