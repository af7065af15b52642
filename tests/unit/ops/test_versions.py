"""Versions of runs for operators (issue 35 item 4): runs per pinned version, the migration
dry-run, and unknown stored fields refused, never dropped."""

from __future__ import annotations

import json
from datetime import timedelta
from pathlib import Path

import decider_support as support
import pytest
from pydantic import ValidationError

from runfacts.ops.versions import migration_plan, pinned, unknown_fields, version_rows
from runfacts.processors.decider.state_json import dump_state, load_state
from runfacts.schemas.common import RunVersions

GOLDEN = Path(__file__).parents[2] / "contract" / "golden-state" / "run-state"
NEW = RunVersions(stateSchema=support.VERSIONS.stateSchema, modelRoute="route-2026-12",
                  toolManifest="tools-v9", policy=support.VERSIONS.policy)


def _v4() -> bytes:
    return next(GOLDEN.glob("v4-*.json")).read_bytes().strip()


def test_runs_are_counted_per_pinned_version_when_listed_with_versions() -> None:
    waiting = support.Scenario().given(support.create(), support.propose_refund()).s  # an open approval
    dispatched = support.dispatched_refund().s  # a call in flight
    ended = waiting.model_copy(update={"runId": "run-ended", "status": "completed"})
    moved = waiting.model_copy(update={"runId": "run-moved", "versions": NEW})

    rows = {(r["dimension"], r["version"]): r for r in version_rows([waiting, dispatched, ended, moved])}

    route = rows[("modelRoute", support.VERSIONS.modelRoute)]
    assert route == {"dimension": "modelRoute", "version": support.VERSIONS.modelRoute, "runs": 3, "active": 2,
                     "inFlight": 1, "waitingForApproval": 1}
    assert rows[("modelRoute", "route-2026-12")]["runs"] == 1 and rows[("toolManifest", "tools-v9")]["active"] == 1
    assert rows[("policy", support.VERSIONS.policy)]["runs"] == 4  # the same policy everywhere
    assert [r["dimension"] for r in version_rows([waiting])] == ["stateSchema", "modelRoute", "toolManifest",
                                                                "policy"]


def test_migration_dry_run_names_lapsing_approvals_calls_to_reverify_and_changed_versions() -> None:
    state = load_state(_v4())  # waiting for an approval, 33 calls, 3 compacted
    approval = state.open_approvals()[0]
    later = approval.expiresAt + timedelta(seconds=1)

    plan = migration_plan(_v4(), state, NEW, "after-refund-check", later)

    assert plan.refused is None and plan.unknownFields == [] and plan.toNode == "after-refund-check"
    assert plan.changes == {"modelRoute": (pinned(state).modelRoute, "route-2026-12"),
                            "toolManifest": (pinned(state).toolManifest, "tools-v9")}
    assert [a["approvalId"] for a in plan.lapsing] == [approval.approvalId]
    assert migration_plan(_v4(), state, NEW, "n", approval.expiresAt - timedelta(seconds=1)).lapsing == []
    assert plan.reverify == []  # every lookup is verified
    in_flight = support.dispatched_refund().s
    assert [c["toolCallId"] for c in migration_plan(dump_state(in_flight)[0], in_flight, NEW, "n", later).reverify] \
        == ["tool-call-031"]


def test_migration_is_refused_when_already_current_or_ended() -> None:
    state = load_state(_v4())
    assert "already on these versions" in migration_plan(_v4(), state, pinned(state), "n", state.updatedAt).refused
    ended = state.model_copy(update={"status": "completed"})
    assert "is completed" in migration_plan(_v4(), ended, NEW, "n", state.updatedAt).refused


@pytest.mark.parametrize("where", ["top", "tool call", "approval"])
def test_stored_state_with_a_field_this_code_does_not_know_is_refused_not_dropped(where: str) -> None:
    value = json.loads(_v4())
    if where == "top":
        value["delegations"] = []
        path = "delegations"
    elif where == "tool call":
        value["toolCalls"]["tool-call-031"]["parentCallId"] = "c-1"
        path = "toolCalls.tool-call-031.parentCallId"
    else:
        approval = next(iter(value["approvals"]))
        value["approvals"][approval]["delegatedTo"] = "x"
        path = f"approvals.{approval}.delegatedTo"
    raw = json.dumps(value, separators=(",", ":")).encode()

    with pytest.raises(ValidationError, match="Extra inputs are not permitted"):
        load_state(raw)  # refused: never read with the field dropped
    assert unknown_fields(raw) == [path]
    plan = migration_plan(raw, None, NEW, "n", load_state(_v4()).updatedAt)
    assert plan.refused is not None and path in plan.refused and "upgraded runfacts" in plan.refused


def test_old_format_state_with_an_unknown_field_is_refused_after_migration_too() -> None:
    value = json.loads(next(GOLDEN.glob("v2-*.json")).read_bytes())
    value["futureField"] = 1
    raw = json.dumps(value).encode()
    with pytest.raises(ValidationError, match="futureField"):
        load_state(raw)
    assert unknown_fields(raw) == ["futureField"]  # the old names the migration renames are known
    assert unknown_fields(_v4()) == []
    assert unknown_fields(_v4().replace(b'"stateFormat":4', b'"stateFormat":9')) == ["stateFormat=9 (a newer format)"]
