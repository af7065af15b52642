"""The operator CLI against the real broker and the real run decider."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import pytest
from engine_support import EngineThread, settings
from ops_support import Deployment, waiting_run, write_users
from typer.testing import CliRunner

from runfacts.cli import app
from runfacts.security.identity import AuthenticationFailed

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def deployment(kafka_bootstrap: str, tmp_path_factory: pytest.TempPathFactory):
    """One decider on unique topics for the module; each test uses its own run id."""
    unique = uuid.uuid4().hex[:10]
    dep = Deployment.create(kafka_bootstrap, f"ops{unique}")
    state_dir = tmp_path_factory.mktemp("decider") / "state"
    engine = EngineThread(dep.decider(), settings(kafka_bootstrap, state_dir, f"ops-{unique}")).start()
    yield dep
    engine.stop()


def _cli(dep: Deployment, users: Path, args: list[str], user: str | None = None):
    return CliRunner().invoke(app, args, env={**dep.env(users, user), "COLUMNS": "200"})


def test_inspect_shows_waiting_approval_without_personal_data_when_run_waits(
        deployment: Deployment, unique: str, tmp_path: Path) -> None:
    run = f"run-{unique}"
    deployment.send(*waiting_run(run))
    deployment.wait_state(run, lambda s: s.status == "waiting_for_approval")
    users = write_users(tmp_path / "users.toml")

    result = _cli(deployment, users, ["inspect", run, "--json"])

    assert result.exit_code == 0, result.output
    summary = json.loads(result.output)
    assert summary["status"] == "waiting_for_approval"
    assert [a["approvalId"] for a in summary["pendingApprovals"]] == ["approval-tool-call-031"]
    assert summary["toolCalls"][0]["execution"] == "proposed"
    assert summary["budget"]["toolCalls"] == {"used": 0, "limit": 5}
    for personal in ("refund order-001", "customer-42", "user-7", "Refund 42.00 EUR"):
        assert personal not in result.output
    table = _cli(deployment, users, ["inspect", run])
    assert table.exit_code == 0 and "approval-tool-call-031" in table.output


def test_view_prints_the_published_user_view_without_personal_data_when_run_waits(
        deployment: Deployment, unique: str, tmp_path: Path) -> None:
    run = f"run-{unique}"
    deployment.send(*waiting_run(run))
    deployment.wait_state(run, lambda s: s.status == "waiting_for_approval")
    users = write_users(tmp_path / "users.toml")

    published = _cli(deployment, users, ["view", run, "--json"])
    operator = _cli(deployment, users, ["view", run, "--role", "operator", "--json"])

    assert published.exit_code == 0 and operator.exit_code == 0, published.output + operator.output
    user_view, operator_view = json.loads(published.output), json.loads(operator.output)
    assert (user_view["role"], user_view["status"]) == ("user", "waiting_for_approval")
    assert user_view["approvalBanner"]["asks"] == "refund on order-001 (high risk)"
    assert operator_view["role"] == "operator" and operator_view["operator"]["openApprovals"] == 1
    assert user_view["version"] == operator_view["version"]
    for personal in ("refund order-001", "customer-42", "user-7", "Refund 42.00 EUR"):
        assert personal not in published.output + operator.output
    assert _cli(deployment, users, ["view", run, "--role", "auditor"]).exit_code != 0


def test_approve_prints_accepted_events_then_rejection_when_sent_twice(
        deployment: Deployment, unique: str, tmp_path: Path) -> None:
    run, approval = f"run-{unique}", f"approval-call-{unique}"
    deployment.send(*waiting_run(run, f"call-{unique}"))
    deployment.wait_state(run, lambda s: s.status == "waiting_for_approval")
    users = write_users(tmp_path / "users.toml")

    first = _cli(deployment, users, ["approve", approval], user="alice")
    second = _cli(deployment, users, ["approve", approval, "--run", run], user="alice")

    assert first.exit_code == 0, first.output
    assert "approval.granted" in first.output and "tool.call.authorized" in first.output
    assert second.exit_code == 3, second.output
    assert "rejected run.resume" in second.output
    state = deployment.state(run)
    assert state is not None and state.approvals[approval].decidedBy == "alice"


def test_approve_is_rejected_with_forbidden_role_when_operator_approves_refund(
        deployment: Deployment, unique: str, tmp_path: Path) -> None:
    run = f"run-{unique}"
    deployment.send(*waiting_run(run))
    deployment.wait_state(run, lambda s: s.status == "waiting_for_approval")
    users = write_users(tmp_path / "users.toml")

    result = _cli(deployment, users, ["reject", "approval-tool-call-031", "--run", run], user="olga")

    assert result.exit_code == 3
    assert "[forbidden_role]" in result.output


def test_stop_cancels_run_and_runs_list_filters_it_when_no_call_is_in_flight(
        deployment: Deployment, unique: str, tmp_path: Path) -> None:
    run = f"run-{unique}"
    deployment.send(*waiting_run(run))
    deployment.wait_state(run, lambda s: s.status == "waiting_for_approval")
    users = write_users(tmp_path / "users.toml")

    stopped = _cli(deployment, users, ["stop", run, "--reason", "customer withdrew"], user="olga")
    listed = _cli(deployment, users, ["runs", "list", "--status", "cancelled", "--json"])
    stuck = _cli(deployment, users, ["runs", "list", "--stuck-longer-than", "1h", "--json"])

    assert stopped.exit_code == 0, stopped.output
    assert "run.cancel_requested" in stopped.output and "run.cancelled" in stopped.output
    assert [r["runId"] for r in json.loads(listed.output)] == [run]
    assert json.loads(stuck.output) == []


def test_commands_refuse_with_one_line_when_token_is_wrong(
        deployment: Deployment, unique: str, tmp_path: Path) -> None:
    users = write_users(tmp_path / "users.toml")
    env = {**deployment.env(users, "olga"), "RUNFACTS_TOKEN": "not-the-token"}

    result = CliRunner().invoke(app, ["stop", f"run-{unique}"], env=env)

    assert isinstance(result.exception, AuthenticationFailed)
    assert "authentication failed" in str(result.exception)


def test_inspect_names_the_topic_when_run_is_unknown(
        deployment: Deployment, unique: str, tmp_path: Path) -> None:
    users = write_users(tmp_path / "users.toml")

    result = _cli(deployment, users, ["inspect", f"run-missing-{unique}"])

    assert result.exit_code == 1
    assert f"not found in {deployment.names.state}" in str(result.exception)
