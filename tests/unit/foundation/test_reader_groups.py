"""Every reader's group id lies under the prefix its component's ACLs grant (broker-free: the
Consumer is a stand-in that records its configuration and refuses to read)."""

from __future__ import annotations

import re
from typing import Any

import pytest
from confluent_kafka import KafkaError
from decider_support import USER, command
from typer.testing import CliRunner

from runfacts import logread
from runfacts.cli import app
from runfacts.cli.dashboard import DashboardSettings, build_dashboard
from runfacts.client import reader as state_reader
from runfacts.dashboard import feed as dashboard_feed
from runfacts.logread import ReadOptions
from runfacts.ops import client as runlog
from runfacts.schemas import commands as cmd
from runfacts.schemas.errors import InfrastructureError
from runfacts.security.acls import acl_entries, component_access
from runfacts.settings import KafkaSettings
from runfacts.topics import TopicNames, group_prefix, reader_group

KAFKA = KafkaSettings(bootstrap_servers="unused:9092", topic_prefix="acme")
NAMES = TopicNames("acme")


class _Refusing:
    """A Consumer stand-in: notes its config, fails on the first broker call."""

    configs: list[dict[str, Any]] = []

    def __init__(self, conf: dict[str, Any]) -> None:
        _Refusing.configs.append(conf)

    def list_topics(self, *args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("no broker in unit tests")

    def close(self) -> None:
        return None


@pytest.fixture
def groups(monkeypatch: pytest.MonkeyPatch) -> list[dict[str, Any]]:
    _Refusing.configs = []
    for module in (runlog, state_reader, dashboard_feed, logread):
        monkeypatch.setattr(module, "Consumer", _Refusing)
    return _Refusing.configs


def granted(component: str) -> str:
    """The group prefix `component`'s printed ACLs grant READ on."""
    access = next(a for a in component_access(NAMES) if a.component == component)
    [prefix] = {e.resource_name for e in acl_entries(access) if e.resource_type == "GROUP" and e.operation == "READ"}
    return prefix


def assert_group(conf: dict[str, Any], component: str) -> None:
    assert re.fullmatch(rf"{granted(component)}-[0-9a-f]{{12}}", conf["group.id"]), conf["group.id"]


def test_reader_group_is_fresh_under_prefix_when_asked_twice():
    assert group_prefix("acme", "cli") == "acme-cli"
    first, second = reader_group("acme-cli"), reader_group("acme-cli")
    assert first != second and first.startswith("acme-cli-") and len(first) == len("acme-cli-") + 12


def test_state_reader_and_command_client_read_in_cli_groups_when_settings_default(groups):
    with pytest.raises(InfrastructureError):
        runlog.StateReader(KAFKA, NAMES).latest("run-1")
    with pytest.raises(InfrastructureError):
        runlog.CommandClient(KAFKA, NAMES).send(_stop())
    assert len(groups) == 2
    for conf in groups:
        assert_group(conf, "cli")


def test_dashboard_reads_in_dashboard_groups_when_built_from_settings(groups, tmp_path, monkeypatch):
    users = tmp_path / "users.toml"
    users.write_text("")
    monkeypatch.setenv("RUNFACTS_USERS_FILE", str(users))
    dashboard = build_dashboard(DashboardSettings(), KAFKA)
    assert dashboard.facts is not None
    for feed in (dashboard.views, dashboard.states, dashboard.facts):
        assert not feed.start().wait_ready(5)
        assert isinstance(feed.error, InfrastructureError)
    with pytest.raises(InfrastructureError):
        dashboard.commands.send(_stop())
    assert len(groups) == 4
    for conf in groups:
        assert_group(conf, "dashboard")


def test_kafkalog_reads_in_auditor_groups_when_options_default(groups):
    with pytest.raises(RuntimeError):
        logread.log_range(KAFKA, NAMES.events, timeout=1)
    with pytest.raises(RuntimeError):
        logread.log_range(KAFKA, NAMES.events, timeout=1, options=ReadOptions(component="cli"))
    assert_group(groups[0], "auditor")
    assert_group(groups[1], "cli")


def test_dlq_list_reads_in_cli_group_when_prefix_given(groups):
    listed = CliRunner().invoke(app, ["dlq", "list", "--prefix", "acme"])
    assert isinstance(listed.exception, RuntimeError)
    [conf] = groups
    assert_group(conf, "cli")


class _Error:
    def __init__(self, code: int) -> None:
        self.error_ = KafkaError(code)

    def error(self) -> KafkaError:
        return self.error_

    def topic(self) -> str:
        return "acme.dlq"

    def partition(self) -> int:
        return 0


def test_logread_raises_when_read_is_refused():
    with pytest.raises(InfrastructureError, match="GROUP_AUTHORIZATION_FAILED"):
        logread._end_or_raise(_Error(KafkaError.GROUP_AUTHORIZATION_FAILED), {("acme.dlq", 0)})


def test_logread_closes_partition_when_end_is_reached():
    open_parts = {("acme.dlq", 0)}
    logread._end_or_raise(_Error(KafkaError._PARTITION_EOF), open_parts)
    assert open_parts == set()


def _stop() -> Any:
    return command(cmd.StopRun, USER, run="run-1", reason="enough")
