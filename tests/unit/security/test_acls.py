"""ACLs per component, derived from the topic spec: least privilege and the printed forms."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from runfacts.cli import app
from runfacts.connectors.relay.loop import transactional_id_for
from runfacts.schemas.errors import ConfigError
from runfacts.security.acls import COMPONENTS, AclEntry, acl_entries, component_access, kafka_acls_command
from runfacts.topics import TopicNames, runfacts_topics

NAMES = TopicNames("acme")
ACCESS = {a.component: a for a in component_access(NAMES)}


def writers(topic: str) -> set[str]:
    return {c for c, a in ACCESS.items() if topic in a.writes}


def test_component_access_covers_every_component_when_derived_from_topic_names():
    assert tuple(ACCESS) == COMPONENTS
    assert ACCESS["decider"].principal == "User:acme-decider"


def test_component_access_lets_only_decider_write_facts_when_derived():
    for topic in (NAMES.events, NAMES.state, NAMES.user_view):
        assert writers(topic) == {"decider"}
    assert writers(NAMES.audit) == writers(NAMES.trajectory) == writers(NAMES.memory) == {"projector"}


def test_component_access_denies_commands_write_when_component_only_projects():
    assert writers(NAMES.commands) == {"dispatcher", "outbox-relay", "dashboard", "cli", "client"}


def test_component_access_gives_every_spec_topic_a_reader_and_writer_when_derived():
    for spec in runfacts_topics(NAMES):
        readers = {c for c, a in ACCESS.items() if spec.name in a.reads}
        assert readers and writers(spec.name), spec.name


def test_acl_entries_grant_group_txn_and_changelog_prefixes_when_component_is_engine_app():
    entries = acl_entries(ACCESS["decider"])
    p = "User:acme-decider"
    assert AclEntry(p, "GROUP", "PREFIXED", "acme-run-decider", "READ") in entries
    assert AclEntry(p, "TRANSACTIONAL_ID", "PREFIXED", "acme-run-decider", "WRITE") in entries
    assert AclEntry(p, "TOPIC", "PREFIXED", "acme-run-decider-", "CREATE") in entries
    assert AclEntry(p, "TOPIC", "LITERAL", NAMES.commands, "READ") in entries
    assert AclEntry(p, "TOPIC", "LITERAL", NAMES.commands, "WRITE") not in entries
    assert entries == sorted(set(entries))


def test_acl_entries_grant_no_group_when_component_only_writes():
    relay = acl_entries(ACCESS["outbox-relay"])
    assert {e.resource_type for e in relay} == {"TOPIC", "TRANSACTIONAL_ID"}
    assert {(e.resource_name, e.operation) for e in relay if e.resource_type == "TOPIC"} == {
        (NAMES.commands, "WRITE"), (NAMES.commands, "DESCRIBE")}


def test_relay_acl_covers_the_relays_transactional_id_under_the_topic_prefix():
    tid = transactional_id_for("acme", "runfacts_outbox", "0123abcd4567")
    granted = {e.resource_name for e in acl_entries(ACCESS["outbox-relay"]) if e.resource_type == "TRANSACTIONAL_ID"}
    assert granted == {"acme-outbox-"} and tid.startswith("acme-outbox-")


def test_component_access_uses_override_when_principal_is_given():
    access = component_access(NAMES, {"dashboard": "User:web"})
    assert {a.component: a.principal for a in access}["dashboard"] == "User:web"


def test_component_access_raises_config_error_when_override_names_unknown_component():
    with pytest.raises(ConfigError, match="dashbord"):
        component_access(NAMES, {"dashbord": "User:web"})


def test_kafka_acls_command_spells_operation_in_camel_case_when_printed():
    entry = AclEntry("User:acme-decider", "TOPIC", "PREFIXED", "acme-decider-", "DESCRIBE_CONFIGS")
    assert kafka_acls_command(entry).endswith(
        "--allow-principal 'User:acme-decider' --operation DescribeConfigs --topic 'acme-decider-' "
        "--resource-pattern-type prefixed")


def test_security_acls_cli_prints_json_when_format_is_json(monkeypatch):
    monkeypatch.setenv("RUNFACTS_KAFKA_TOPIC_PREFIX", "acme")
    result = CliRunner().invoke(app, ["security", "acls", "--format", "json", "-c", "projector"])
    assert result.exit_code == 0, result.output
    [projector] = json.loads(result.output)
    assert projector["component"] == "projector"
    assert {"principal": "User:acme-projector", "resource_type": "TOPIC", "pattern_type": "LITERAL",
            "resource_name": "acme.run.events", "operation": "READ", "host": "*"} in projector["acls"]


def test_security_acls_cli_prints_table_rows_when_format_is_default(monkeypatch):
    monkeypatch.setenv("RUNFACTS_KAFKA_TOPIC_PREFIX", "acme")
    result = CliRunner().invoke(app, ["security", "acls", "-c", "dashboard", "--principal", "dashboard=User:web"])
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert lines[0].split() == ["component", "principal", "resource", "pattern", "name", "operations"]
    assert ["dashboard", "User:web", "TOPIC", "LITERAL", "acme.run.commands", "DESCRIBE,WRITE"] in [
        line.split() for line in lines]


@pytest.mark.parametrize("args", [["--format", "yaml"], ["-c", "bogus"], ["--principal", "cli=web"]])
def test_security_acls_cli_fails_naming_option_when_argument_is_bad(args):
    result = CliRunner().invoke(app, ["security", "acls", *args])
    assert result.exit_code != 0 and isinstance(result.exception, ConfigError)


def test_security_policy_cli_prints_version_when_policy_is_valid():
    result = CliRunner().invoke(app, ["security", "policy"])
    assert result.exit_code == 0 and result.output.startswith("policy 2026-12-06.2 sha256:")
    assert ("tenant-scoped sources: cli, dashboard, outbox:support-desk; services (any tenant): "
            "agent-harness, decider-timer, decider-xrun, dispatcher; cross-tenant roles: operator") in result.output


def test_security_keygen_cli_prints_keyring_entry_when_kid_is_valid():
    from runfacts.processors.policy.approvals import parse_keyring

    result = CliRunner().invoke(app, ["security", "keygen", "k2026-12"])
    entry = json.loads(result.output)
    assert len(parse_keyring(json.dumps({"keys": entry, "current": "k2026-12"})).keys["k2026-12"].secret) == 32


def test_client_component_reads_its_feeds_writes_commands_and_only_the_decider_writes_versions():
    client = ACCESS["client"]
    assert client.principal == "User:acme-client"
    assert set(client.reads) == {NAMES.events, NAMES.state, NAMES.user_view, NAMES.decider_versions,
                                 NAMES.memory, NAMES.keys, NAMES.output}
    assert client.writes == (NAMES.commands, NAMES.keys, NAMES.output)  # it seals personal fields at the source
    assert writers(NAMES.output) == {"client"}  # a run's partial output: its agent's (runfacts.client.output)
    assert writers(NAMES.decider_versions) == {"decider"}
    entries = acl_entries(client)
    p = "User:acme-client"
    assert AclEntry(p, "GROUP", "PREFIXED", "acme-client", "READ") in entries
    assert AclEntry(p, "GROUP", "PREFIXED", "acme-client", "DESCRIBE") in entries
    assert AclEntry(p, "TOPIC", "LITERAL", NAMES.decider_versions, "READ") in entries
    assert AclEntry(p, "TOPIC", "LITERAL", NAMES.commands, "WRITE") in entries
    assert AclEntry(p, "TOPIC", "LITERAL", NAMES.events, "WRITE") not in entries
    assert AclEntry(p, "TRANSACTIONAL_ID", "PREFIXED", "acme-client-relay-", "WRITE") in entries
    decider = acl_entries(ACCESS["decider"])
    assert AclEntry("User:acme-decider", "TOPIC", "LITERAL", NAMES.decider_versions, "WRITE") in decider


def test_the_client_groups_and_relay_id_fall_under_the_granted_prefixes():
    from runfacts.client.client import ClientSettings
    from runfacts.topics import group_prefix, reader_group

    group = reader_group(group_prefix("acme", ClientSettings().component))
    granted = {e.resource_name for e in acl_entries(ACCESS["client"]) if e.resource_type == "GROUP"}
    assert [g for g in granted if group.startswith(g)] == ["acme-client"]
    relay = {e.resource_name for e in acl_entries(ACCESS["client"]) if e.resource_type == "TRANSACTIONAL_ID"}
    assert relay == {"acme-client-relay-"}


def test_security_acls_cli_prints_the_client_component():
    result = CliRunner().invoke(app, ["security", "acls", "--component", "client", "--format", "json"],
                                env={"RUNFACTS_KAFKA_TOPIC_PREFIX": "acme"})
    assert result.exit_code == 0, result.output
    [printed] = json.loads(result.output)
    assert printed["component"] == "client"
    assert {"principal": "User:acme-client", "resource_type": "TOPIC", "pattern_type": "LITERAL",
            "resource_name": "acme.decider.versions", "operation": "READ", "host": "*"} in printed["acls"]


def test_dashboard_acls_cover_what_its_redrive_writes_and_no_fact_topic():
    from runfacts.topics import redrive_transactional_id, redrive_writes, service_redrive_targets

    entries = acl_entries(ACCESS["dashboard"])
    p = "User:acme-dashboard"
    for topic in redrive_writes(NAMES):  # derived from the redrive: its targets and the dlq markers
        assert AclEntry(p, "TOPIC", "LITERAL", topic, "WRITE") in entries
    assert service_redrive_targets(NAMES) == (NAMES.commands,)
    assert AclEntry(p, "TRANSACTIONAL_ID", "PREFIXED", redrive_transactional_id(NAMES.dlq), "WRITE") in entries
    assert not {NAMES.events, NAMES.state, NAMES.user_view} & set(ACCESS["dashboard"].writes)


def test_decider_may_restore_from_and_check_the_run_state_topic_it_uses_as_its_runs_changelog():
    entries = {(e.resource_name, e.operation) for e in acl_entries(ACCESS["decider"]) if e.resource_type == "TOPIC"}
    assert {(NAMES.state, "READ"), (NAMES.state, "WRITE"), (NAMES.state, "DESCRIBE_CONFIGS")} <= entries
    others = {c for c, a in ACCESS.items() if a.configs_read}
    assert others == {"decider"}, "only the decider checks a shared changelog's configs"
