"""Settings shared by every runfacts client: where Kafka is and how to talk to it.

Kafka client options pass straight through to librdkafka, so any cluster works
(SASL/SCRAM, TLS, cloud). Sources, later ones winning:
1. defaults (127.0.0.1:9092, plaintext);
2. a librdkafka properties file named by RUNFACTS_KAFKA_PROPERTIES (`key=value` lines);
3. RUNFACTS_KAFKA_CONFIG, a JSON object of librdkafka options
   (e.g. '{"security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-512"}');
4. RUNFACTS_KAFKA_BOOTSTRAP_SERVERS (or KAFKA_BOOTSTRAP_SERVERS).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import AliasChoices, Field, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from runfacts.partitioning import pin_partitioner
from runfacts.schemas.errors import ConfigError


class KafkaSettings(BaseSettings):
    """Connection settings for every Kafka client runfacts creates."""

    model_config = SettingsConfigDict(
        env_prefix="RUNFACTS_KAFKA_", frozen=True, extra="ignore", validate_by_name=True
    )

    bootstrap_servers: str = Field(
        default="127.0.0.1:9092",
        validation_alias=AliasChoices("RUNFACTS_KAFKA_BOOTSTRAP_SERVERS", "KAFKA_BOOTSTRAP_SERVERS"),
    )
    properties: Path | None = None
    config: dict[str, Any] = Field(default_factory=dict)
    topic_prefix: str = "runfacts"
    partitions: int = 6
    replication_factor: int = 1

    @field_validator("partitions")
    @classmethod
    def _positive(cls, value: int) -> int:
        if value < 1:
            raise ConfigError("RUNFACTS_KAFKA_PARTITIONS", value, "must be at least 1")
        return value

    def client_config(self, **overrides: Any) -> dict[str, Any]:
        """librdkafka configuration for a client: file, JSON, bootstrap, then overrides."""
        conf: dict[str, Any] = {}
        if self.properties is not None:
            conf.update(read_properties(self.properties))
        conf.update(self.config)
        conf["bootstrap.servers"] = self.bootstrap_servers
        conf.update(overrides)
        return conf

    def producer_config(self, **overrides: Any) -> dict[str, Any]:
        """`client_config` for a producer: the partitioner pinned to murmur2_random, so a record keyed
        by a runId lands on the partition whose task owns the run; another one is refused."""
        return pin_partitioner(self.client_config(**overrides), "RUNFACTS_KAFKA_CONFIG")


def read_properties(path: Path) -> dict[str, str]:
    """Parse a librdkafka/Java-style properties file (`key=value`, `#` comments)."""
    if not path.is_file():
        raise ConfigError("RUNFACTS_KAFKA_PROPERTIES", str(path), "file not found")
    props: dict[str, str] = {}
    for number, raw in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        line = raw.strip()
        if not line or line.startswith(("#", "!")):
            continue
        key, sep, value = line.partition("=")
        if not sep:
            raise ConfigError("RUNFACTS_KAFKA_PROPERTIES", f"{path}:{number}", "expected key=value")
        props[key.strip()] = value.strip()
    return props

