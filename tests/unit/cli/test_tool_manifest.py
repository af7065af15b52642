"""`runfacts capabilities export|check` and the served manifest: one source for decider and dispatcher."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from runfacts.cli import app
from runfacts.processors.policy.capabilities import load_capabilities
from runfacts.schemas.errors import ConfigError
from runfacts.tools import load_registry
from runfacts.tools.refund import registry as refund_registry
from runfacts.tools.serve import served_catalog

RUNNER = CliRunner()
BILLING = "examples.billing_tools:registry"


def test_export_writes_the_manifest_the_decider_reads_when_given_a_registry(tmp_path: Path) -> None:
    out = tmp_path / "capabilities.toml"
    result = RUNNER.invoke(app, ["capabilities", "export", BILLING, "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert load_capabilities(out) == load_registry(BILLING).catalog()
    assert load_capabilities(out).get("billing.credit").needs_approval is True


def test_packaged_refund_registry_exports_the_packaged_manifest() -> None:
    assert refund_registry.catalog() == load_capabilities()


def test_check_names_capability_and_field_when_the_manifest_disagrees(tmp_path: Path) -> None:
    out = tmp_path / "capabilities.toml"
    RUNNER.invoke(app, ["capabilities", "export", BILLING, "--out", str(out)])
    out.write_text(out.read_text().replace("needsApproval = true", "needsApproval = false"))
    result = RUNNER.invoke(app, ["capabilities", "check", BILLING, "--capabilities", str(out)])
    assert result.exit_code == 1
    assert "billing.credit: needsApproval is False in" in result.output


def test_served_catalog_refuses_a_manifest_without_a_served_tool(tmp_path: Path) -> None:
    only_refund = tmp_path / "refund.toml"
    RUNNER.invoke(app, ["capabilities", "export", "runfacts.tools.refund:registry", "--out", str(only_refund)])
    with pytest.raises(ConfigError, match="has no capability billing.balance, which registry 'billing' serves"):
        served_catalog(load_registry(BILLING), str(only_refund))


@pytest.mark.parametrize("spec, why", [
    ("examples.billing_tools", "expected module:attribute"),
    ("examples.billing_tools:nothing", "has no attribute 'nothing'"),
    ("examples.billing_tools:Credit", "not a ToolRegistry"),
    ("no_such_module:registry", "cannot import no_such_module"),
])
def test_load_registry_names_the_setting_and_the_fix_when_the_spec_is_bad(spec: str, why: str) -> None:
    with pytest.raises(ConfigError, match=why):
        load_registry(spec)


def test_written_manifest_is_the_registry_catalog_and_content_addressed(tmp_path: Path) -> None:
    from runfacts.tools.manifest import written_manifest

    first = written_manifest(BILLING, tmp_path / "manifests")
    assert written_manifest(BILLING, tmp_path / "manifests") == first
    assert load_capabilities(first) == load_registry(BILLING).catalog()


def test_worker_decider_refuses_tools_and_capabilities_together(tmp_path: Path) -> None:
    result = RUNNER.invoke(app, ["worker", "decider", "--tools", BILLING, "--capabilities", str(tmp_path / "c.toml")])
    assert isinstance(result.exception, ConfigError) and "not both" in str(result.exception)
