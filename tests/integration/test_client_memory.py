"""Memory through runfacts.client on the real stack (decider, dispatcher and memory projector as
`runfacts worker` subprocesses, signed approvals on): a run proposes a lesson citing its own
facts, a reviewer promotes it with a signed decision, a later run's client reads it from the
memory topic until the decider's timer expires it; evidence-free, foreign-evidence and repeated
promotions are refused with the decider's typed reasons; the live memory topic equals a replay."""

from __future__ import annotations

import time
from collections.abc import Iterator
from datetime import timedelta

import pytest
from client_support import AgentStack, agent_stack

from runfacts.client import BadArgument, CommandRejected, Runfacts
from runfacts.projections import memory as memory_view
from runfacts.projections.projector.replay import ReplaySettings, replay
from runfacts.topics import delete_topics

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def stack(kafka_bootstrap: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[AgentStack]:
    with agent_stack(kafka_bootstrap, tmp_path_factory.mktemp("memory"), memory=True) as running:
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


def _topic(rf: Runfacts, topic: str) -> dict[bytes, bytes]:
    return rf.states.scan_topic(topic)


def test_a_later_run_reads_a_confirmed_memory_through_the_client_until_it_expires(
        stack: AgentStack, rf: Runfacts) -> None:
    run = rf.start_run(goal="ticket:T-7004", summary="Refund order-704", user_id="customer-7", tenant="acme")
    run.reason("order-704: carrier lost it", evidence=["order:order-704"])
    run.complete(outcome="ticket:T-7004")
    scope = ("acme", "topic:lost-parcels")
    lesson = run.propose_memory("lessons/lost-parcel", evidence=run.evidence(), scope=scope,
                                expires=timedelta(seconds=8))
    assert not any(e.memoryId == lesson.id for e in rf.memory(scope))  # a candidate is not memory
    rf.review_memory(run.id, lesson, "approve", reviewer="rita")
    later_agent = stack.client(args_store=stack.dir / "later.db")  # not `rf` (connect caches per store)
    assert later_agent is not rf
    try:
        later = later_agent.start_run(goal="ticket:T-7014", summary="Refund order-714", user_id="customer-9",
                                      tenant="acme")
        _memory_of(later_agent, scope, lesson.id, present=True)
        (entry,) = [e for e in later_agent.memory(scope) if e.memoryId == lesson.id]
        assert (entry.runId, entry.reviewer, entry.evidence) == (run.id, "rita", tuple(run.evidence()))
        assert entry.statementRef == "lessons/lost-parcel" and entry.reviewedAt is not None
        assert later_agent.memory(("globex", "topic:lost-parcels")) == []
        key = f"acme|topic:lost-parcels|{run.id}|{lesson.id}".encode()
        assert key in _topic(later_agent, stack.names.memory)  # on the compacted memory topic
        _memory_of(later_agent, scope, lesson.id, present=False, timeout=30)  # gone after its expiry
        later.complete(outcome="ticket:T-7014")
    finally:
        later_agent.close()
    deadline = time.monotonic() + 30  # the decider's timer wrote the fact, the projector the tombstone
    while key in _topic(rf, stack.names.memory) and time.monotonic() < deadline:
        time.sleep(0.3)
    assert key not in _topic(rf, stack.names.memory)
    expired = [e.event for e in rf.run(run.id).journal.entries if e.event_type == "memory.expired"]
    assert [e.payload.memoryId for e in expired] == [lesson.id]  # no command: the decider's timer


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


def test_the_live_memory_topic_is_byte_identical_to_a_replay_of_the_events(stack: AgentStack, rf: Runfacts) -> None:
    run = rf.start_run(goal="ticket:T-7006", summary="Refund order-706", user_id="customer-7", tenant="acme")
    run.reason("order-706: left at the neighbour's", evidence=["order:order-706"])
    scope = ("acme", "topic:neighbours")
    lesson = run.propose_memory("lessons/neighbour", evidence=run.evidence(), scope=scope, expires=timedelta(days=1))
    rf.review_memory(run.id, lesson, "approve", reviewer="rita")
    _memory_of(rf, scope, lesson.id, present=True)
    kafka, names = stack.options.kafka, stack.names
    target = f"{names.memory}.replay"
    try:
        report = replay(kafka, ReplaySettings("memory", target, names.events))
        live = _topic(rf, names.memory)
        assert _topic(rf, target) == live and len(live) == report.records >= 2  # this lesson and test 1's
        assert {memory_view.decode(v).memoryId for v in live.values()} >= {lesson.id}
    finally:
        delete_topics(kafka, [target])
