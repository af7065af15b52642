"""`runfacts runs list --versions | drain | migrate` against the real broker and the real run
decider (issue 35 item 4): runs per pinned version, a drain that later run.creates meet as a
rejection naming the version and the fix, and an explicit, audited migration after an upgrade."""

from __future__ import annotations

import json
import uuid
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path

import pytest
from decider_support import CTX, VERSIONS, create
from engine_support import EngineThread, settings
from ops_support import Deployment, waiting_run, write_users
from typer.testing import CliRunner

from runfacts.cli import app
from runfacts.ops.client import CommandClient
from runfacts.processors.decider.app import DeciderShell
from runfacts.schemas.common import RunVersions

pytestmark = pytest.mark.integration
NEWER = RunVersions(**{**VERSIONS.model_dump(), "modelRoute": "route-2026-12"})


def _cli(dep: Deployment, users: Path, *args: str):
    return CliRunner().invoke(app, list(args), env={**dep.env(users, "olga"), "COLUMNS": "200"})


def test_drain_refuses_new_runs_and_migrate_moves_a_waiting_run_after_an_upgrade(
        kafka_bootstrap: str, tmp_path: Path) -> None:
    unique = uuid.uuid4().hex[:10]
    dep = Deployment.create(kafka_bootstrap, f"ver{unique}")
    users, state_dir = write_users(tmp_path / "users.toml"), tmp_path / "state"
    old = EngineThread(DeciderShell(dep.names, CTX).application(), settings(kafka_bootstrap, state_dir, "v")).start()
    run = f"run-{unique}"
    try:
        dep.send(*waiting_run(run))
        dep.wait_state(run, lambda s: s.status == "waiting_for_approval")
        listed = _cli(dep, users, "runs", "list", "--versions", "--json")
        assert listed.exit_code == 0, listed.output
        rows = {(r["dimension"], r["version"]): r for r in json.loads(listed.output)}
        assert rows[("modelRoute", VERSIONS.modelRoute)] == {
            "dimension": "modelRoute", "version": VERSIONS.modelRoute, "runs": 1, "active": 1, "inFlight": 0,
            "waitingForApproval": 1}

        drained = _cli(dep, users, "runs", "drain", "--version", VERSIONS.modelRoute, "--json")  # dimension found
        assert drained.exit_code == 0, drained.output
        assert json.loads(drained.output)["active"] == 1
        watched = _cli(dep, users, "runs", "drain", "--version", VERSIONS.modelRoute, "--progress")
        assert watched.exit_code == 0 and "1 run(s) still active on it" in watched.output, watched.output
        client = CommandClient(dep.kafka, dep.names)
        try:
            refused = client.send(create(run=f"run-new-{unique}", at=datetime.now(UTC))).rejection
        finally:
            client.close()
        assert refused.reasonCode == "version_draining" and VERSIONS.modelRoute in refused.detail
    finally:
        old.stop()

    new = EngineThread(DeciderShell(dep.names, replace(CTX, current_versions=NEWER)).application(),
                       settings(kafka_bootstrap, state_dir, "v")).start()  # the upgrade
    try:
        target = NEWER.model_dump_json()
        plan = _cli(dep, users, "runs", "migrate", run, "--to-node", "after-check", "--dry-run", "--versions", target,
                    "--json")
        assert plan.exit_code == 0, plan.output
        reported = json.loads(plan.output)
        assert reported["changes"] == {"modelRoute": {"from": VERSIONS.modelRoute, "to": "route-2026-12"}}
        assert reported["unknownFields"] == [] and reported["refused"] is None
        assert dep.state(run).versions == VERSIONS  # a dry run sends nothing

        moved = _cli(dep, users, "runs", "migrate", run, "--to-node", "after-check", "--versions", target, "--yes")
        assert moved.exit_code == 0, moved.output
        assert "run.migrated" in moved.output
        state = dep.wait_state(run, lambda s: s.versions == NEWER)
        assert state.checkpoint is not None and state.checkpoint.node == "after-check"
        again = _cli(dep, users, "runs", "migrate", run, "--to-node", "x", "--versions", target, "--yes")
        assert again.exit_code == 3 and "already on these versions" in again.output
    finally:
        new.stop()
