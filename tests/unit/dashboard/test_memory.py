"""The console's memory candidates: listed to memory reviewers of the run's tenant only, unexpired,
oldest first; Confirm/Reject build a ReviewMemory bound to the candidate's hash."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from console_support import refund_story
from decider_support import Scenario

from runfacts.dashboard.console import memory_table
from runfacts.dashboard.runlist import memory_inbox, row_of
from runfacts.ops.control import ControlError, Issue, review_memory_command
from runfacts.ops.views import Viewer
from runfacts.processors.decider.state import MemoryCandidate
from runfacts.schemas.common import Actor

T0 = datetime(2026, 11, 30, 9, 0, tzinfo=UTC)
RITA = Viewer("rita", ("memory_reviewer",), frozenset({"memory.review"}), "acme", True)


def _state(run: str, tenant: str, memories: dict[str, tuple[str, datetime]]):
    base = Scenario().given(*refund_story(run, T0, tenant=tenant)).s
    held = {m: MemoryCandidate(memoryId=m, statementRef=f"lessons/{m}", statementHash="h" * 64, evidence=("e-1",),
                               scopeTenant=tenant, scopeKind="capability", scopeId="payments.refund",
                               expiresAt=expires, candidateHash=f"hash-{m}", proposedBy="agent-harness",
                               proposedAt=T0 + timedelta(minutes=len(m)), status=status)  # type: ignore[arg-type]
            for m, (status, expires) in memories.items()}
    return base.model_copy(update={"memories": held})


def test_memory_inbox_lists_pending_unexpired_candidates_of_the_reviewers_tenant_oldest_first():
    later = T0 + timedelta(days=30)
    runs = [row_of(_state("run-a", "acme", {"memory-long-one": ("proposed", later), "memory-b": ("proposed", later),
                                            "memory-done": ("confirmed", later),
                                            "memory-old": ("proposed", T0 - timedelta(minutes=1))})),
            row_of(_state("run-g", "globex", {"memory-g": ("proposed", later)}))]

    rows = memory_inbox(runs, RITA, T0)

    assert [r.memory.memoryId for r in rows] == ["memory-b", "memory-long-one"]  # proposed earlier first
    assert memory_inbox(runs, Viewer("alice", ("support_agent",), None, "acme", True), T0) == []
    page = memory_table(rows, T0, "tok", may_decide=True)
    assert page.count('class="confirm"') == 2 and "globex" not in page
    assert 'class="confirm"' not in memory_table(rows, T0, "tok", may_decide=False)


def test_review_memory_command_binds_the_candidates_hash_and_refuses_a_decided_one():
    state = _state("run-a", "acme", {"memory-b": ("proposed", T0 + timedelta(days=1)),
                                     "memory-done": ("confirmed", T0 + timedelta(days=1))})
    issue = Issue(Actor(subjectId="rita", roles=("memory_reviewer",), tenant="acme", authSource="dashboard"),
                  "dash-1", T0)

    command = review_memory_command(state, "memory-b", "approve", issue, "token")

    assert command.payload.candidateHash == "hash-memory-b" and command.expectedVersion == state.version
    with pytest.raises(ControlError, match="confirmed"):
        review_memory_command(state, "memory-done", "reject", issue)
    with pytest.raises(ControlError, match="no memory candidate"):
        review_memory_command(state, "memory-nope", "approve", issue)
