"""Capability manifests: TOML parsing, validation errors that name the setting."""

from __future__ import annotations

from pathlib import Path

import pytest

from runfacts.processors.policy.capabilities import CapabilityManifest, Risk, load_capabilities, parse_capabilities
from runfacts.processors.policy.retry import RetryPolicy
from runfacts.schemas.errors import ConfigError

MANIFEST = """
[[capability]]
capabilityId = "payments.refund"
risk = "high"
requiredRole = "support_agent"
needsApproval = true
reconciliationDeadlineMs = 600000
[capability.retry]
maxAttempts = 4
baseBackoffMs = 200
maxBackoffMs = 5000
deadlineMs = 30000

[[capability]]
capabilityId = "crm.note"
risk = "low"
requiredRole = "agent"
needsApproval = false
reconciliationDeadlineMs = 1000
[capability.retry]
maxAttempts = 1
baseBackoffMs = 10
maxBackoffMs = 10
deadlineMs = 100
"""


def test_parse_capabilities_builds_manifests_when_toml_is_valid():
    catalog = parse_capabilities(MANIFEST)
    refund = catalog.get("payments.refund")
    assert refund == CapabilityManifest(
        capability_id="payments.refund", risk=Risk.HIGH, required_role="support_agent",
        needs_approval=True, reconciliation_deadline_ms=600_000,
        retry=RetryPolicy(max_attempts=4, base_backoff_ms=200, max_backoff_ms=5000,
                          deadline_ms=30_000),
    )
    note = catalog.get("crm.note")
    assert (note.needs_approval, note.approval_ttl_ms, note.self_approval) == (False, 900_000, False)


def test_catalog_get_raises_config_error_naming_id_when_capability_is_unknown():
    with pytest.raises(ConfigError, match="payments.charge"):
        parse_capabilities(MANIFEST).get("payments.charge")


@pytest.mark.parametrize(
    ("edit", "setting"),
    [
        (('risk = "high"', 'risk = "extreme"'), "capability[0].risk"),
        (("maxAttempts = 4", "maxAttempts = 0"), "capability[0].retry.maxAttempts"),
        (("needsApproval = true\n", "needsApproval = true\napprovalTtlMs = 0\n"),
         "capability[0].approvalTtlMs"),
        (("needsApproval = true\n", ""), "capability[0].needsApproval"),
        (('requiredRole = "agent"', 'requiredRole = "agent"\nowner = "x"'), "capability[1].owner"),
        (('"crm.note"', '"payments.refund"'), "capability[1].capabilityId"),
    ],
)
def test_parse_capabilities_raises_config_error_naming_setting_when_value_is_bad(edit, setting):
    old, new = edit
    with pytest.raises(ConfigError, match=setting.replace("[", r"\[").replace("]", r"\]")):
        parse_capabilities(MANIFEST.replace(old, new, 1))


@pytest.mark.parametrize("text", ["not = [toml", "", "[other]\nx = 1"])
def test_parse_capabilities_raises_config_error_when_file_has_no_capabilities(text):
    with pytest.raises(ConfigError):
        parse_capabilities(text)


def test_load_capabilities_reads_file_when_path_given(tmp_path: Path):
    path = tmp_path / "caps.toml"
    path.write_text(MANIFEST)
    assert set(load_capabilities(path).capabilities) == {"payments.refund", "crm.note"}


def test_load_capabilities_raises_config_error_naming_path_when_file_is_missing(tmp_path: Path):
    with pytest.raises(ConfigError, match="missing.toml"):
        load_capabilities(tmp_path / "missing.toml")


def test_load_capabilities_returns_packaged_refund_manifest_when_no_path():
    refund = load_capabilities().get("payments.refund")
    assert refund.needs_approval is True and refund.self_approval is False
    assert refund.retry.max_attempts >= 2
