"""The agent group's session timeout (issue 36 bar: resume after kill -9 in <= 5 s): configurable
through RUNFACTS_AGENT_*, 3 s by default (below Kafka's default broker floor of 6 s), a heartbeat a
third of it, a bad pair refused naming the setting, and the broker's refusal explained naming
group.min.session.timeout.ms (the fallback itself runs on the real broker in
tests/integration/test_agent_session_fallback.py)."""

from __future__ import annotations

import pytest

from runfacts.client.agents import AgentSettings, session_refused
from runfacts.schemas.errors import ConfigError


def test_default_session_fails_over_within_the_bar_with_a_third_for_heartbeats(
        monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("SESSION_TIMEOUT_MS", "HEARTBEAT_INTERVAL_MS", "SESSION_FALLBACK"):
        monkeypatch.delenv(f"RUNFACTS_AGENT_{name}", raising=False)
    settings = AgentSettings()
    assert settings.group_options() == {"session.timeout.ms": 3000, "heartbeat.interval.ms": 1000}
    assert settings.session_fallback is True


def test_session_and_heartbeat_come_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RUNFACTS_AGENT_SESSION_TIMEOUT_MS", "2000")
    monkeypatch.setenv("RUNFACTS_AGENT_HEARTBEAT_INTERVAL_MS", "400")
    monkeypatch.setenv("RUNFACTS_AGENT_SESSION_FALLBACK", "false")
    settings = AgentSettings()
    assert settings.group_options() == {"session.timeout.ms": 2000, "heartbeat.interval.ms": 400}
    assert settings.session_fallback is False
    # the fallback session (the broker's minimum) gets its own heartbeat, a third of it
    assert settings.group_options(6000) == {"session.timeout.ms": 6000, "heartbeat.interval.ms": 2000}


def test_a_heartbeat_not_below_the_session_is_refused_naming_the_setting() -> None:
    with pytest.raises(ConfigError, match="RUNFACTS_AGENT_HEARTBEAT_INTERVAL_MS=3000.*below RUNFACTS_AGENT_SESSION"):
        AgentSettings(session_timeout_ms=3000, heartbeat_interval_ms=3000)


def test_the_broker_s_refusal_names_its_setting_and_the_fix() -> None:
    warned = session_refused("refunds", 3000, 6000, fallback=True)
    assert "group.min.session.timeout.ms is 6000 ms" in warned and "joining with 6000 ms" in warned
    assert "restart" in warned and "RUNFACTS_AGENT_SESSION_TIMEOUT_MS" in warned
    failed = session_refused("refunds", 3000, None, fallback=False)
    assert "unreadable here (Kafka's default is 6000 ms)" in failed and "joining" not in failed
    assert "RUNFACTS_AGENT_SESSION_FALLBACK=true" in failed
