"""Memory through runfacts.client on the real stack (decider and dispatcher as `runfacts worker`
subprocesses, signed approvals on): a run proposes a lesson citing its own facts, a reviewer
promotes it with a signed decision; evidence-free, foreign-evidence and repeated promotions are
refused with the decider's typed reasons."""

from __future__ import annotations

import time
from collections.abc import Iterator
from datetime import timedelta

import pytest
from client_support import AgentStack, agent_stack

from runfacts.client import BadArgument, CommandRejected, Runfacts
from runfacts.projections import memory as memory_view

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def stack(kafka_bootstrap: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[AgentStack]:
    with agent_stack(kafka_bootstrap, tmp_path_factory.mktemp("memory")) as running:
        yield running


@pytest.fixture(scope="module")
def rf(stack: AgentStack) -> Iterator[Runfacts]:
    client = stack.client()
    yield client
    client.close()


def test_a_lesson_is_proposed_and_promoted_by_a_reviewer_when_its_evidence_is_the_runs(rf: Runfacts) -> None:
    run = rf.start_run(goal="ticket:T-7001", summary="Refund order-701", user_id="customer-7", tenant="acme")
    run.reason("order-701 arrived damaged", evidence=["order:order-701"])
    run.complete(outcome="ticket:T-7001")
    evidence = run.evidence("reasoning.recorded", "run.completed")
    assert len(evidence) == 2
    lesson = run.propose_memory("lessons/damaged-on-arrival", evidence=evidence,
                                scope=("acme", "capability:payments.refund"), expires=timedelta(days=30))
    assert lesson.version is not None and lesson.id.startswith("memory-")
    assert rf.review_memory(run.id, lesson, "approve", reviewer="rita") is not None
    with pytest.raises(CommandRejected) as twice:
        rf.review_memory(run.id, lesson, "approve", reviewer="rosa")
    assert twice.value.reason == "memory_already_decided"
    facts = [e.event for e in rf.run(run.id).journal.entries]
    view: memory_view.MemoryView = {}
    for event in facts:
        view = memory_view.evolve(view, event)
    now = facts[-1].occurredAt  # the memory view of the run's facts, as of the last one
    (entry,) = memory_view.entries(view, ("acme", "capability", "payments.refund"), now)
    assert (entry.reviewer, entry.evidence) == ("rita", tuple(evidence))


def test_promotion_is_refused_when_the_evidence_is_not_a_fact_of_the_run(rf: Runfacts) -> None:
    run = rf.start_run(goal="ticket:T-7002", summary="Refund order-702", user_id="customer-7", tenant="acme")
    other = rf.start_run(goal="ticket:T-7003", summary="Refund order-703", user_id="customer-8", tenant="acme")
    other.reason("something else", evidence=["order:order-703"])
    foreign = other.evidence("reasoning.recorded")
    lesson = run.propose_memory("lessons/borrowed", evidence=foreign, scope=("acme", "topic:refunds"),
                                expires=timedelta(hours=1))
    with pytest.raises(CommandRejected) as refused:
        rf.review_memory(run.id, lesson, "approve", reviewer="rita")
    assert refused.value.reason == "evidence_not_in_run"
    with pytest.raises(CommandRejected) as empty:
        run.propose_memory("lessons/none", evidence=[], scope=("acme", "topic:refunds"), expires=timedelta(hours=1))
    assert empty.value.reason == "evidence_required"
    with pytest.raises(BadArgument):
        run.propose_memory("lessons/forever", evidence=foreign, scope=("acme", "topic:refunds"), expires=None)  # type: ignore[arg-type]


def _memory_of(rf: Runfacts, scope: tuple[str, str], memory_id: str, present: bool, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if any(e.memoryId == memory_id for e in rf.memory(scope)) == present:
            return
        time.sleep(0.2)
    raise AssertionError(f"{memory_id} {'not ' if present else ''}in rf.memory({scope}) within {timeout}s")


def test_a_later_reader_sees_a_confirmed_memory_until_it_expires(rf: Runfacts) -> None:
    run = rf.start_run(goal="ticket:T-7004", summary="Refund order-704", user_id="customer-7", tenant="acme")
    run.reason("order-704: carrier lost it", evidence=["order:order-704"])
    scope = ("acme", "topic:lost-parcels")
    lesson = run.propose_memory("lessons/lost-parcel", evidence=run.evidence(), scope=scope,
                                expires=timedelta(seconds=6))
    assert not any(e.memoryId == lesson.id for e in rf.memory(scope))  # a candidate is not memory
    rf.review_memory(run.id, lesson, "approve", reviewer="rita")
    _memory_of(rf, scope, lesson.id, present=True)
    (entry,) = [e for e in rf.memory(scope) if e.memoryId == lesson.id]
    assert (entry.runId, entry.reviewer, entry.evidence) == (run.id, "rita", tuple(run.evidence()))
    assert rf.memory(("globex", "topic:lost-parcels")) == []
    _memory_of(rf, scope, lesson.id, present=False, timeout=15)  # gone after its expiry


def test_a_revoked_memory_is_no_longer_answered(rf: Runfacts) -> None:
    run = rf.start_run(goal="ticket:T-7005", summary="Refund order-705", user_id="customer-7", tenant="acme")
    run.reason("order-705: wrong colour", evidence=["order:order-705"])
    scope = ("acme", "topic:wrong-colour")
    lesson = run.propose_memory("lessons/wrong-colour", evidence=run.evidence(), scope=scope,
                                expires=timedelta(days=1))
    rf.review_memory(run.id, lesson, "approve", reviewer="rita")
    _memory_of(rf, scope, lesson.id, present=True)
    assert rf.revoke_memory(run.id, lesson, reviewer="rosa", reason="the supplier fixed it") is not None
    _memory_of(rf, scope, lesson.id, present=False)
    with pytest.raises(CommandRejected) as again:
        rf.revoke_memory(run.id, lesson, reviewer="rosa")
    assert again.value.reason == "memory_revoked"
