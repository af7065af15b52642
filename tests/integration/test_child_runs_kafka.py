"""Child runs on the real broker (docs/decisions/0012-child-runs.md): the run decider as a
`runfacts worker` subprocess on two partitions; the parent and its children on different
partitions, so every cross-run effect travels as a command between two decider tasks."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator

import pytest
from client_support import AgentStack

from runfacts.client import Runfacts
from runfacts.client.outcomes import Resolved, ended
from runfacts.demo.stack import DemoOptions, demo_manifest
from runfacts.partitioning import partition_for
from runfacts.processors.decider.state import RunState
from runfacts.schemas import commands as cmd
from runfacts.schemas.common import Actor
from runfacts.settings import KafkaSettings

pytestmark = pytest.mark.integration
USER = Actor(subjectId="user-1", roles=("user",), authSource="dashboard")
H1, H2 = "sha256:" + "1" * 64, "sha256:" + "2" * 64


class DeciderStack(AgentStack):
    """Topics and the run decider only (no dispatcher, no provider: no tool is called here)."""

    def start(self, crash_at: str = "", memory: bool = False) -> None:  # type: ignore[override]
        self.dir.mkdir(parents=True, exist_ok=True)
        (self.dir / "capabilities.toml").write_text(demo_manifest(self.options.approval_ttl_ms))
        self._topics()
        self._spawn_worker("decider", ["--capabilities", str(self.dir / "capabilities.toml")],
                           **self.options.signing_env)
        self.wait_log("decider.log", "assigned partitions")


@pytest.fixture(scope="module")
def rf(kafka_bootstrap: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Runfacts]:
    options = DemoOptions(prefix=f"ch-{uuid.uuid4().hex[:10]}", workdir=tmp_path_factory.mktemp("children"),
                          partitions=2, kafka=KafkaSettings(bootstrap_servers=kafka_bootstrap))
    stack = DeciderStack(options)
    try:
        stack.start()
        client = stack.client()
        yield client
        client.close()
    finally:
        stack.stop()


def on_partition(prefix: str, partition: int) -> str:
    """A fresh run id whose murmur2 partition (of 2) is `partition`."""
    while True:
        run_id = f"{prefix}-{uuid.uuid4().hex[:12]}"
        if partition_for(run_id.encode(), 2) == partition:
            return run_id


def state_when(rf: Runfacts, run_id: str, ok, timeout: float = 60) -> RunState:  # noqa: ANN001
    deadline = time.monotonic() + timeout
    while True:
        state = rf.states.latest(run_id)
        if state is not None and ok(state):
            return state
        if time.monotonic() > deadline:
            raise AssertionError(f"{run_id}: state {state and state.status} not as expected within {timeout}s")
        time.sleep(0.2)


def test_child_on_another_partition_spends_its_sub_budget_and_the_parent_merges_with_a_conflict(rf: Runfacts) -> None:
    parent_id, child_id = on_partition("run-parent", 0), on_partition("run-child", 1)
    parent = rf.start_run(goal="ticket:T-1", summary="collect evidence", user_id="customer-1",
                          budget={"steps": 20, "toolCalls": 4}, run_id=parent_id)
    parent.append_evidence("ev-shared", H1, "ref/parent")
    child = parent.start_child(goal="ticket:T-1:fhir", summary="fhir evidence",
                               budget={"steps": 5, "toolCalls": 1}, run_id=child_id)

    assert rf.state(parent_id).budget.reserved.steps == 5
    child.debit("read", steps=2)
    child.append_evidence("ev-shared", H2, "ref/child")  # the child may append what the parent holds: its own ledger
    child.append_evidence("ev-new", H1, "ref/child-new")
    child.complete()
    report = parent.child_report(child, timeout=60)

    assert (report.status, report.used.steps, report.released.steps) == ("completed", 2, 3)
    state = state_when(rf, parent_id, lambda s: not s.live_children() and s.status == "needs_review")
    assert state.statusReason == "evidence_conflict" and state.budget.reserved.steps == 0
    assert state.budget.used.steps == 2
    assert state.evidenceItems["ev-shared"].by == parent_id and state.evidenceItems["ev-shared"].hash == H1
    assert state.evidenceItems["ev-new"].by == child_id
    assert rf.state(child_id).parentRunId == parent_id


def test_cancelling_the_parent_cancels_its_child_on_another_partition(rf: Runfacts) -> None:
    parent_id, child_id = on_partition("run-parent", 1), on_partition("run-child", 0)
    parent = rf.start_run(goal="ticket:T-2", summary="two workers", user_id="customer-2",
                          budget={"steps": 10}, run_id=parent_id)
    child = parent.start_child(goal="ticket:T-2:a", summary="worker a", budget={"steps": 4}, run_id=child_id)

    rf.command(parent, cmd.CancelRun, {"reason": "user_requested"}, USER)
    rf.wait(child, lambda j: Resolved(True) if ended(j.entries) else None, "child ended", 60)
    rf.wait(parent, lambda j: Resolved(True) if ended(j.entries) else None, "parent ended", 60)

    assert [e.event_type for e in child.journal.entries].count("run.cancelled") == 1
    assert parent.child_report(child, timeout=5).status == "cancelled"
    assert state_when(rf, parent_id, lambda s: s.status == "cancelled").budget.reserved.steps == 0


def test_child_ledger_too_large_for_one_record_reaches_the_parent_on_another_partition_in_parts(rf: Runfacts) -> None:
    """ADR 0012 "Limits": 60 items with 1 KiB refs (over 60 KiB: one report would be near the record
    limit) travel as parts, then the end report; the parent holds every item, by the child."""
    parent_id, child_id = on_partition("run-parent", 0), on_partition("run-child", 1)
    parent = rf.start_run(goal="ticket:T-3", summary="many documents", user_id="customer-3",
                          budget={"steps": 10}, run_id=parent_id)
    child = parent.start_child(goal="ticket:T-3:docs", summary="documents", budget={"steps": 4}, run_id=child_id)
    for i in range(60):
        child.append_evidence(f"doc-{i:02d}", H1, f"s3://evidence/{i:02d}/" + "r" * 1024)
    child.complete()
    assert parent.child_report(child, timeout=60).status == "completed"

    state = state_when(rf, parent_id, lambda s: not s.live_children() and len(s.evidenceItems) == 60)
    assert {item.by for item in state.evidenceItems.values()} == {child_id} and state.status == "running"
    types = [e.event_type for e in parent.journal.entries]
    assert types.count("evidence.merged") >= 3 and "command.rejected" not in types  # 60 KiB in 24 KiB parts
