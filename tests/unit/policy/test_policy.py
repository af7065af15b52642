"""Access policy: trusted sources, command roles, approver checks, load-time invariants."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest

from runfacts.processors.policy import access as policy_module
from runfacts.processors.policy.access import (
    DEFAULT_POLICY,
    allowed_command_types,
    check_approver,
    check_command,
    check_tenant,
    effective_roles,
    load_policy,
    parse_policy,
)
from runfacts.processors.policy.capabilities import load_capabilities, parse_capabilities
from runfacts.schemas.commands import COMMAND_CLASSES, RetryToolCall, StopRun
from runfacts.schemas.common import Actor, CommandEnvelope
from runfacts.schemas.errors import ConfigError

POLICY = load_policy()
REFUND = POLICY.capabilities.get("payments.refund")
T0 = datetime(2026, 12, 1, 9, 0, tzinfo=UTC)
RUNTIME_TYPES = [  # only the harness, dispatcher and timer identities may send these
    "budget.debit", "checkpoint.save", "progress.update", "reasoning.record", "run.complete", "run.fail",
    "timer.fire", "tool.call.claim", "tool.call.propose", "tool.call.report_accepted",
    "tool.call.report_completed", "tool.call.report_failed", "tool.call.report_reconciled",
    "tool.call.report_result_unknown", "turn.complete", "turn.start",
]

SMALL = """
policyVersion = "2026-01-02.3"
[sources.dashboard]
roles = ["support_agent", "operator"]
[commands]
{rules}
"""


def actor(subject: str = "alice", roles: tuple[str, ...] = ("support_agent",), source: str = "dashboard",
          tenant: str | None = None) -> Actor:
    return Actor(subjectId=subject, roles=roles, authSource=source, tenant=tenant)


def envelope(command_type: str, who: Actor) -> CommandEnvelope:
    return CommandEnvelope(
        commandId="c-1", commandType=command_type, runId="run-1", actor=who, issuedAt=T0,
        correlationId="corr-1", schemaVersion=1,
    )


def stop(who: Actor) -> StopRun:
    return StopRun(commandId="c-1", runId="run-1", actor=who, issuedAt=T0, correlationId="corr-1",
                   payload={"reason": "user asked"})


def all_rules(**override: str) -> str:
    rules = {t: 'roles = ["operator"]' for t in COMMAND_CLASSES}
    rules["run.resume"] = "roleFromCapability = true"
    rules.update(override)
    return "\n".join(f'"{t}" = {{ {body} }}' for t, body in rules.items())


def test_load_policy_reads_version_and_rules_when_default_is_packaged():
    assert POLICY.version == "2026-12-06.2"
    assert set(POLICY.commands) == set(COMMAND_CLASSES)
    assert {"dashboard", "cli", "agent-harness", "dispatcher", "decider-timer"} <= set(POLICY.sources)
    assert POLICY.capabilities == load_capabilities()
    assert len(POLICY.digest) == 64


def test_check_command_allows_when_role_may_issue_type():
    assert check_command(POLICY, stop(actor(roles=("user",)))) is None


@pytest.mark.parametrize("who", [actor(subject=""), actor(subject="   "), actor(source="")])
def test_check_command_rejects_missing_actor_when_subject_or_source_is_blank(who):
    assert check_command(POLICY, stop(who)) == "missing_actor"


def test_check_command_rejects_untrusted_source_when_source_not_in_policy():
    assert check_command(POLICY, stop(actor(roles=("operator",), source="intranet-script"))) == "untrusted_source"


def test_check_command_rejects_forbidden_role_when_retry_without_operator():
    retry = RetryToolCall(commandId="c-2", runId="run-1", actor=actor(roles=("support_agent", "supervisor")),
                          issuedAt=T0, correlationId="corr-1", payload={"toolCallId": "tc-1"})
    assert check_command(POLICY, retry) == "forbidden_role"
    assert check_command(POLICY, retry.model_copy(update={"actor": actor(roles=("operator",), source="cli")})) is None


def test_check_command_ignores_role_when_source_cannot_vouch_for_it():
    forged = actor(subject="svc-dispatcher", roles=("dispatcher", "operator"), source="dispatcher")
    assert effective_roles(POLICY, forged) == {"dispatcher"}
    assert check_command(POLICY, envelope("tool.call.retry", forged)) == "forbidden_role"


@pytest.mark.parametrize("command_type", RUNTIME_TYPES)
def test_check_command_rejects_forbidden_role_when_human_sends_runtime_command(command_type):
    human = actor(roles=("user", "support_agent", "supervisor", "operator"))
    assert check_command(POLICY, envelope(command_type, human)) == "forbidden_role"


@pytest.mark.parametrize(("command_type", "service"), [
    ("tool.call.propose", "agent-harness"), ("reasoning.record", "agent-harness"),
    ("tool.call.claim", "dispatcher"), ("tool.call.report_result_unknown", "dispatcher"),
    ("timer.fire", "decider-timer"),
])
def test_check_command_allows_when_service_sends_its_runtime_command(command_type, service):
    role = {"agent-harness": "agent", "dispatcher": "dispatcher", "decider-timer": "decider"}[service]
    identity = actor(subject=f"svc-{service}", roles=(role,), source=service)
    assert check_command(POLICY, envelope(command_type, identity)) is None


def test_check_command_rejects_forbidden_role_when_timer_is_sent_by_dispatcher():
    dispatcher = actor(subject="svc-dispatcher", roles=("dispatcher",), source="dispatcher")
    assert check_command(POLICY, envelope("timer.fire", dispatcher)) == "forbidden_role"


def test_check_command_defers_role_to_capability_when_command_is_resume():
    assert check_command(POLICY, envelope("run.resume", actor(roles=("user",)))) is None
    assert check_command(POLICY, envelope("run.resume", actor(source="nowhere"))) == "untrusted_source"


def test_check_command_rejects_no_policy_rule_when_type_is_unknown():
    assert check_command(POLICY, envelope("run.teleport", actor(roles=("operator",)))) == "no_policy_rule"


def test_check_approver_allows_when_role_matches_and_approver_is_not_requester():
    assert check_approver(POLICY, REFUND, actor(subject="bob"), requested_by="alice") is None


def test_check_approver_rejects_forbidden_role_when_role_is_not_required_role():
    assert check_approver(POLICY, REFUND, actor(subject="bob", roles=("user",)), "alice") == "forbidden_role"


def test_check_approver_rejects_forbidden_role_when_service_claims_human_role():
    harness = actor(subject="svc", roles=("support_agent",), source="agent-harness")
    assert check_approver(POLICY, REFUND, harness, "alice") == "forbidden_role"


def test_check_approver_rejects_self_approval_when_manifest_forbids_it():
    assert REFUND.self_approval is False
    assert check_approver(POLICY, REFUND, actor(subject="alice"), requested_by="alice") == "self_approval_forbidden"


def test_check_approver_rejects_self_approval_when_approver_created_run_for_another_user():
    assert check_approver(POLICY, REFUND, actor(subject="alice"), {"customer-7", "alice"}) == "self_approval_forbidden"
    assert check_approver(POLICY, REFUND, actor(subject="bob"), {"customer-7", "alice"}) is None


def test_check_approver_allows_self_approval_when_manifest_permits_it():
    lenient = REFUND.model_copy(update={"self_approval": True})
    assert check_approver(POLICY, lenient, actor(subject="alice"), requested_by="alice") is None


@pytest.mark.parametrize(("who", "reason"), [
    (actor(subject=""), "missing_actor"), (actor(source="intranet"), "untrusted_source"),
])
def test_check_approver_rejects_actor_when_missing_or_untrusted(who, reason):
    assert check_approver(POLICY, REFUND, who, "alice") == reason


def test_allowed_command_types_lists_role_commands_when_actor_is_operator_or_user():
    operator = allowed_command_types(POLICY, actor(roles=("operator",), source="cli"))
    user = allowed_command_types(POLICY, actor(roles=("user",)))
    assert {"tool.call.retry", "run.migrate", "run.stop"} <= operator
    assert "tool.call.retry" not in user and "run.stop" in user
    assert allowed_command_types(POLICY, actor(source="nowhere")) == frozenset()


def test_parse_policy_rejects_config_when_contract_type_has_no_rule():
    text = SMALL.format(rules='"run.stop" = { roles = ["operator"] }')
    with pytest.raises(ConfigError, match="has no rule"):
        parse_policy(text, POLICY.capabilities)


def test_parse_policy_rejects_config_when_rule_names_unknown_type():
    with pytest.raises(ConfigError, match="run.teleport"):
        parse_policy(SMALL.format(rules=all_rules(**{"run.teleport": 'roles = ["operator"]'})), POLICY.capabilities)


def test_parse_policy_rejects_config_when_no_source_vouches_for_role():
    text = SMALL.format(rules=all_rules(**{"run.stop": 'roles = ["oprator"]'}))
    with pytest.raises(ConfigError, match="oprator"):
        parse_policy(text, POLICY.capabilities)


def test_parse_policy_rejects_config_when_capability_role_is_not_vouched():
    catalog = parse_capabilities(
        (Path(__file__).parents[3] / "processors/policy/capabilities.toml").read_text().replace(
            'requiredRole = "support_agent"', 'requiredRole = "refund_officer"'))
    with pytest.raises(ConfigError, match="refund_officer"):
        parse_policy(SMALL.format(rules=all_rules()), catalog)


@pytest.mark.parametrize(("edit", "names"), [
    (lambda t: t.replace("2026-01-02.3", "latest"), "policyVersion"),
    (lambda t: t.replace("roleFromCapability = true", 'roleFromCapability = true, roles = ["operator"]'),
     "run.resume"),
    (lambda t: t + "\nowner = 'me'\n", "owner"),
    (lambda t: t + "\n[[", "not valid TOML"),
    (lambda t: t.replace('roles = ["support_agent", "operator"]', "roles = []"), "sources.dashboard.roles"),
])
def test_parse_policy_rejects_config_naming_setting_when_file_is_invalid(edit, names):
    with pytest.raises(ConfigError, match=names):
        parse_policy(edit(SMALL.format(rules=all_rules())), POLICY.capabilities)


def test_parse_policy_changes_digest_when_text_changes_without_version_bump():
    text = SMALL.format(rules=all_rules())
    first = parse_policy(text, POLICY.capabilities)
    second = parse_policy(text.replace('"operator"]', '"operator", "support_agent"]', 1), POLICY.capabilities)
    assert first.version == second.version and first.digest != second.digest


def test_load_policy_reads_file_when_path_is_given(tmp_path):
    path = tmp_path / "policy.toml"
    path.write_text(SMALL.format(rules=all_rules()))
    assert load_policy(path).version == "2026-01-02.3"
    with pytest.raises(ConfigError, match="cannot read"):
        load_policy(tmp_path / "missing.toml")


def test_policy_default_file_ships_as_package_data():
    assert (Path(policy_module.__file__).parent / DEFAULT_POLICY).is_file()


@pytest.mark.parametrize(("who", "run_tenant", "expected"), [
    (actor(tenant="acme"), "acme", None),
    (actor(tenant="acme"), "globex", "tenant_mismatch"),
    (actor(), "acme", "tenant_mismatch"),  # a tenantless human on a tenant's run
    (actor(tenant="acme"), None, "tenant_mismatch"),  # a tenant's human on a tenantless run
    (actor(), None, None),
    (actor("olga", ("operator",), "cli"), "acme", None),  # a cross-tenant role
    (actor("agent-harness", ("agent",), "agent-harness"), "acme", None),  # a service source
    (actor("dispatcher-1", ("dispatcher",), "dispatcher", tenant="globex"), "acme", None),
    (actor("mallory", ("operator",), "outbox:support-desk", tenant="globex"), "acme", "tenant_mismatch"),
])
def test_check_tenant_allows_only_own_tenant_when_source_is_tenant_scoped(who, run_tenant, expected):
    assert check_tenant(POLICY, envelope("run.stop", who), run_tenant) == expected


def test_load_policy_marks_services_not_tenant_scoped_when_default_is_packaged():
    scoped = {name for name, rule in POLICY.sources.items() if rule.tenant_scoped}
    assert scoped == {"dashboard", "cli", "outbox:support-desk"}
    assert POLICY.cross_tenant_roles == {"operator"}


def test_parse_policy_scopes_source_to_tenants_when_file_does_not_say():
    parsed = parse_policy(SMALL.format(rules=all_rules()), POLICY.capabilities)
    assert parsed.sources["dashboard"].tenant_scoped and parsed.cross_tenant_roles == frozenset()


def test_parse_policy_rejects_config_when_no_source_vouches_for_cross_tenant_role():
    text = 'crossTenantRoles = ["root"]\n' + SMALL.format(rules=all_rules())
    with pytest.raises(ConfigError, match="crossTenantRoles.*root"):
        parse_policy(text, POLICY.capabilities)


def test_parse_policy_rejects_config_naming_setting_when_tenant_scoped_is_not_a_boolean():
    text = SMALL.format(rules=all_rules()).replace('roles = ["support_agent", "operator"]',
                                                   'roles = ["support_agent", "operator"]\ntenantScoped = "sometimes"')
    with pytest.raises(ConfigError, match="sources.dashboard.tenantScoped"):
        parse_policy(text, POLICY.capabilities)
