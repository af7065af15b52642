"""The dashboard's command submission signs as authSource "dashboard" with the key in its
environment (issue 20); the decider's check accepts what it sent (broker-free: the producer is
a stand-in that keeps what it was given)."""

from __future__ import annotations

import base64
import json
from typing import Any

from decider_support import USER, command

from runfacts.cli.dashboard import DashboardSettings, build_dashboard
from runfacts.ops import client as ops_client
from runfacts.processors.policy.keyring import ENV_SOURCE_KEYS, load_source_keys_if_configured
from runfacts.processors.policy.sources import check_source
from runfacts.schemas import commands as cmd
from runfacts.settings import KafkaSettings

SECRET = base64.urlsafe_b64encode(b"s" * 32).decode()


class _KeepingProducer:
    sent: list[dict[str, Any]] = []

    def __init__(self, config: dict[str, Any]) -> None:
        pass

    def produce(self, topic: str, value: bytes, key: bytes, headers: Any = None, on_delivery: Any = None) -> None:
        self.sent.append({"topic": topic, "value": value, "headers": headers})

    def flush(self, timeout: float = 0) -> int:
        return 0


def test_dashboard_command_client_signs_with_the_dashboard_key_from_the_environment(tmp_path, monkeypatch):
    users = tmp_path / "users.toml"
    users.write_text("")
    keys = json.dumps({"dashboard": {"current": "dsh-1", "keys": {"dsh-1": SECRET}}})
    monkeypatch.setenv("RUNFACTS_USERS_FILE", str(users))
    monkeypatch.setenv(ENV_SOURCE_KEYS, keys)
    monkeypatch.setattr(ops_client, "Producer", _KeepingProducer)
    dashboard = build_dashboard(DashboardSettings(), KafkaSettings(bootstrap_servers="unused:9092"))

    stop = command(cmd.StopRun, USER, reason="user pressed stop")  # USER comes through the dashboard
    dashboard.commands.send(stop, wait=False)

    [sent] = _KeepingProducer.sent
    verifier = load_source_keys_if_configured({ENV_SOURCE_KEYS: keys})
    assert verifier is not None
    assert check_source(verifier, "dashboard", sent["value"], sent["headers"], 0) is None
