"""Versions of runs for operators, pure: which runs are pinned to which version, and what moving
one run to the runtime's current versions would do (docs/ops.md "Draining and migrating a version").

- `version_rows(states)`: per dimension (state schema, model route, tool manifest, policy) and
  version, how many runs are pinned to it, how many of them have not ended, and how many of those
  have calls in flight or approvals open (`runfacts runs list --versions`). A run is pinned to
  its checkpoint's versions when it has one (what a resume re-checks), else to those it started on.
- `migration_plan(raw, state, to, node, now)`: what `runfacts runs migrate RUN --to-node NODE
  --dry-run` reports before an explicit, audited MigrateRun: the versions that change, the
  approvals that lapse (expired by now: the run pauses for re-authorization, never dispatches on
  the old grant), the calls that re-verify (in flight: reconciled or verified before the run goes
  on), and the fields of the stored record this code does not know (refused, never dropped:
  `unknown_fields`).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from pydantic import BaseModel
from pydantic_core import from_json

from runfacts.processors.decider.state import TERMINAL, RunState
from runfacts.processors.decider.state_json import RUN_STATE
from runfacts.processors.engine.versions import FIELD, NewerStoredVersion
from runfacts.schemas.common import RunVersions

DIMENSIONS = ("stateSchema", "modelRoute", "toolManifest", "policy")
"""The versions a run is pinned to (`RunVersions`), in the order they are listed."""


def pinned(state: RunState) -> RunVersions:
    """The versions a run is pinned to: its checkpoint's (what a resume re-checks), else its own."""
    return state.checkpoint.versions if state.checkpoint else state.versions


def version_rows(states: list[RunState]) -> list[dict[str, Any]]:
    """One row per (dimension, version): runs pinned to it, active ones, and how many of those
    wait on a call in flight or an open approval; dimensions in `DIMENSIONS` order."""
    rows: dict[tuple[str, str], dict[str, Any]] = {}
    for state in states:
        versions = pinned(state).model_dump()
        for dimension in DIMENSIONS:
            row = rows.setdefault((dimension, versions[dimension]), {
                "dimension": dimension, "version": versions[dimension], "runs": 0, "active": 0,
                "inFlight": 0, "waitingForApproval": 0})
            row["runs"] += 1
            if state.status not in TERMINAL:
                row["active"] += 1
                row["inFlight"] += bool(state.in_flight_calls())
                row["waitingForApproval"] += bool(state.open_approvals())
    order = {d: i for i, d in enumerate(DIMENSIONS)}
    return sorted(rows.values(), key=lambda r: (order[r["dimension"]], r["version"]))


def unknown_fields(raw: bytes) -> list[str]:
    """The dotted paths of fields in a stored run state (migrated to today's shape first) that
    `RunState` does not know, in its nested models and maps of models too; a record of a newer
    format is one such finding. A record with any is refused by `load_state` (the models forbid
    extra fields): a newer runfacts wrote it, and dropping them would lose facts."""
    try:
        value = RUN_STATE.read_json(raw)
    except NewerStoredVersion as exc:
        return [f"{FIELD}={exc.found} (a newer format)"]
    return _unknown(value, RunState, "")


def _unknown(value: Any, model: type[BaseModel], at: str) -> list[str]:
    if not isinstance(value, dict):
        return []
    found = []
    for name, item in value.items():
        field = model.model_fields.get(name)
        if field is None:
            found.append(f"{at}{name}")
            continue
        nested = _model_of(field.annotation)
        if nested is None:
            continue
        if isinstance(item, dict) and _is_map(field.annotation):
            for key, entry in item.items():
                found += _unknown(entry, nested, f"{at}{name}.{key}.")
        else:
            found += _unknown(item, nested, f"{at}{name}.")
    return found


def _model_of(annotation: Any) -> type[BaseModel] | None:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for arg in getattr(annotation, "__args__", ()):
        found = _model_of(arg)
        if found is not None:
            return found
    return None


def _is_map(annotation: Any) -> bool:
    return getattr(annotation, "__origin__", None) is dict


@dataclass(frozen=True)
class MigrationPlan:
    """What moving one run to `to` would do; `refused` says why it cannot be sent at all."""

    runId: str
    status: str
    node: str | None
    toNode: str
    changes: dict[str, tuple[str, str]]
    lapsing: list[dict[str, str]]
    reverify: list[dict[str, str]]
    unknownFields: list[str]
    refused: str | None

    def as_json(self) -> dict[str, Any]:
        return {"runId": self.runId, "status": self.status, "node": self.node, "toNode": self.toNode,
                "changes": {k: {"from": a, "to": b} for k, (a, b) in self.changes.items()},
                "approvalsThatLapse": self.lapsing, "callsThatReverify": self.reverify,
                "unknownFields": self.unknownFields, "refused": self.refused}


def migration_plan(raw: bytes, state: RunState | None, to: RunVersions, node: str, now: datetime) -> MigrationPlan:
    """What `runs migrate --dry-run` reports. `state` is None when `raw` could not be read (its
    unknown fields are listed and the migration refused)."""
    unknown = unknown_fields(raw)
    if state is None:
        run_id = str(from_json(raw).get("runId", "?"))
        why = f"the stored state has fields this runfacts does not know ({', '.join(unknown) or 'unreadable'}): " \
              "a newer runfacts wrote it; run this command from an upgraded runfacts"
        return MigrationPlan(run_id, "?", None, node, {}, [], [], unknown, why)
    old, new = pinned(state).model_dump(), to.model_dump()
    changes = {d: (old[d], new[d]) for d in DIMENSIONS if old[d] != new[d]}
    return MigrationPlan(state.runId, state.status, state.checkpoint.node if state.checkpoint else None, node,
                         changes, _lapsing(state, now), _reverify(state), unknown, _refusal(state, changes))


def _refusal(state: RunState, changes: dict[str, tuple[str, str]]) -> str | None:
    if state.terminal:
        return f"run {state.runId} is {state.status}: an ended run is not migrated"
    if state.status == "cancelling":
        return f"run {state.runId} is cancelling: it ends on its versions"
    if not changes:
        return f"run {state.runId} is already on these versions: nothing to migrate"
    return None


def _lapsing(state: RunState, now: datetime) -> list[dict[str, str]]:
    """Approvals the run would find expired when it goes on: open ones cannot be decided any more,
    granted or consumed ones no longer authorize a dispatch attempt (a new approval is asked)."""
    out = []
    for approval in state.approvals.values():
        if approval.status in ("open", "granted", "consumed") and now >= approval.expiresAt:
            call = state.toolCalls.get(approval.toolCallId)
            if approval.status != "consumed" or (call is not None and call.awaiting_claim):
                out.append({"approvalId": approval.approvalId, "toolCallId": approval.toolCallId,
                            "status": approval.status, "expiresAt": approval.expiresAt.isoformat()})
    return out


def _reverify(state: RunState) -> list[dict[str, str]]:
    """Calls whose outcome is not settled: the dispatcher reconciles (result_unknown) or verifies
    (accepted, dispatching) them before anything new is dispatched; completed calls whose
    verification is still pending are verified again."""
    out = []
    for call in state.toolCalls.values():
        if call.in_flight:
            how = "reconcile by externalRequestId" if call.execution == "result_unknown" else "verify"
        elif call.execution == "completed" and call.verification == "pending":
            how = "verify"
        else:
            continue
        out.append({"toolCallId": call.toolCallId, "capabilityId": call.capabilityId,
                    "execution": call.execution, "verification": call.verification, "then": how})
    return out
