"""The memory projection (issue 25): expiry by the decider's timer, the memory projector on the
engine's test driver (records at confirmation, tombstones at revocation and expiry, exactly once,
byte-identical to `runfacts replay --projection memory`), and a property over random histories:
the compacted memory topic never holds an expired, revoked or unconfirmed entry."""

from __future__ import annotations

from collections import defaultdict
from datetime import datetime, timedelta

from decider_support import (
    AGENT,
    REFUND_HASH,
    RUN,
    Scenario,
    claim,
    command,
    completed,
    create,
    policy_ctx,
    propose_refund,
    resume,
    timer,
)
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from runfacts.partitioning import partition_for
from runfacts.processors.decider.app import timer_command
from runfacts.processors.decider.timers import wanted_timers
from runfacts.processors.engine.testdriver import InputRecord, TestDriver
from runfacts.processors.policy.retry import call_idempotency_key
from runfacts.projections import memory as memory_view
from runfacts.projections.eventlog import EventReader
from runfacts.projections.projector.memory import MemoryProjectorShell, app_name
from runfacts.projections.projector.replay import MemoryProjector, projectors
from runfacts.schemas import codec
from runfacts.schemas import commands as cmd
from runfacts.schemas.common import Actor, EventBase
from runfacts.topics import TopicNames
from runfacts.workers import memory_projector

POLICY = policy_ctx()
NAMES = TopicNames("mp")
PARTITIONS = 3
ACME_USER = Actor(subjectId="user-7", roles=("user",), tenant="acme", authSource="dashboard")
ACME_SUPPORT = Actor(subjectId="alice", roles=("support_agent",), tenant="acme", authSource="dashboard")
REVIEWER = Actor(subjectId="rita", roles=("memory_reviewer",), tenant="acme", authSource="dashboard")
SCOPE = ("acme", "capability", "payments.refund")
Topic = dict[bytes, bytes]


class Run:
    """One acme run on the pure decider, with the decider shell's timer loop in miniature:
    `advance(now)` fires every timer `wanted_timers` lists that is due by `now`, in due order,
    as the shell's `timer_command` would (issuedAt = the due time)."""

    def __init__(self, run: str = RUN) -> None:
        self.run = run
        created = create(tenant="acme").model_copy(update={"actor": ACME_USER, "runId": run})
        key = call_idempotency_key(run, "acme", "refund", "order-001", REFUND_HASH, None)
        steps = [propose_refund(), resume(actor=ACME_SUPPORT), claim(key=key), completed()]
        self.s = Scenario(POLICY).given(created, *[c.model_copy(update={"runId": run}) for c in steps])
        self.evidence = next(e.eventId for e in self.s.log if e.eventType == "tool.call.completed")
        self.now = self.s.s.updatedAt + timedelta(seconds=1)

    def when(self, c: cmd.CommandBase) -> list[EventBase]:
        self.s.when(c.model_copy(update={"runId": self.run}))
        return self.s.last

    def propose(self, memory: str, seconds: int, evidence: str | None = None) -> list[EventBase]:
        return self.when(command(cmd.ProposeMemory, AGENT, at=self._tick(), memoryId=memory,
                                 statementRef=f"lessons/{memory}", statementHash="h" * 64,
                                 evidence=(evidence or self.evidence,), scopeTenant="acme", scopeKind="capability",
                                 scopeId="payments.refund", expiresAt=self.now + timedelta(seconds=seconds)))

    def review(self, memory: str, decision: str = "approve") -> list[EventBase]:
        held = self.s.s.memories.get(memory)
        return self.when(command(cmd.ReviewMemory, REVIEWER, at=self._tick(), memoryId=memory, decision=decision,
                                 candidateHash=held.candidateHash if held else "0" * 64))

    def revoke(self, memory: str) -> list[EventBase]:
        return self.when(command(cmd.RevokeMemory, REVIEWER, at=self._tick(), memoryId=memory))

    def end(self) -> list[EventBase]:
        if not self.s.s.terminal:
            return self.when(command(cmd.CompleteRun, at=self._tick(), outcomeRef="o"))
        if not self.s.s.archived:
            return self.when(command(cmd.ArchiveRun, at=self._tick(), checkpointRef=None))
        return []

    def advance(self, seconds: float) -> list[EventBase]:
        self.now += timedelta(seconds=seconds)
        fired: list[EventBase] = []
        while True:
            due = sorted((spec.due, spec.kind, spec.target_id) for spec in wanted_timers(self.s.s).values()
                         if spec.due <= self.now)
            if not due:
                return fired
            at, kind, target = due[0]
            timer_id = next(t for t, spec in wanted_timers(self.s.s).items() if spec.target_id == target)
            fired += self.when(timer_command(self.run, timer_id, int(at.timestamp() * 1000), kind, target))

    def _tick(self) -> datetime:
        self.now += timedelta(milliseconds=1)
        return self.now


def _records(events: list[EventBase]) -> list[InputRecord]:
    """Events as the log holds them: framed, key runId, partition murmur2(runId), as producers place them."""
    out = []
    for e in events:
        key = e.runId.encode()
        out.append(InputRecord(NAMES.events, key, codec.encode(e), partition=partition_for(key, PARTITIONS)))
    return out


def _driver() -> TestDriver:
    return TestDriver(MemoryProjectorShell(NAMES).application(), partitions=PARTITIONS)


def _compacted(driver: TestDriver) -> dict[int, Topic]:
    """The memory topic as compaction leaves it: the last value per key, tombstoned keys gone."""
    latest: dict[int, dict[bytes, bytes | None]] = defaultdict(dict)
    for r in driver.outputs(NAMES.memory):
        assert r.key is not None
        latest[r.partition][r.key] = r.value
    return {p: {k: v for k, v in kv.items() if v is not None} for p, kv in latest.items()
            if any(v is not None for v in kv.values())}


def _replayed(records: list[InputRecord]) -> dict[int, Topic]:
    """What `runfacts replay --projection memory` writes: framed records per partition."""
    projector, reader = MemoryProjector(), EventReader(memory_view.READS)
    offsets: dict[int, int] = defaultdict(int)
    rows: dict[int, Topic] = defaultdict(dict)

    def emit(partition: int, key: str, body: bytes | None) -> None:
        assert body is not None
        rows[partition][key.encode()] = projector.schema.prefix() + body
    for r in records:
        assert r.value is not None and r.partition is not None
        projector.apply(reader.fact(r.value, r.topic, r.partition, offsets[r.partition]), emit)
        offsets[r.partition] += 1
    projector.finish(emit)
    return dict(rows)


def _entries(topic: dict[int, Topic]) -> dict[tuple[str, str], memory_view.MemoryEntry]:
    return {(e.runId, e.memoryId): e for kv in topic.values() for e in map(memory_view.decode, kv.values())}


# --- expiry by the decider's timer --------------------------------------------------------------

def test_memory_expiry_timer_is_wanted_on_an_ended_run_and_fires_memory_expired_at_the_expiry() -> None:
    run = Run()
    run.propose("memory-1", 60)
    run.review("memory-1")
    run.end()
    assert run.s.s.terminal
    spec = wanted_timers(run.s.s)["memory:memory-1"]
    expires = run.s.s.memories["memory-1"].expiresAt
    assert (spec.kind, spec.target_id, spec.due) == ("memory_expiry", "memory-1", expires)
    (expired,) = run.advance(60)
    assert (expired.eventType, expired.payload.memoryId) == ("memory.expired", "memory-1")
    assert expired.payload.expiresAt == spec.due and expired.causationId.startswith("timer:memory:memory-1:")
    assert run.s.s.memories["memory-1"].status == "expired" and run.s.s.memories["memory-1"].decidedBy == "rita"
    assert "memory:memory-1" not in wanted_timers(run.s.s)


def test_memory_expiry_timer_fires_on_an_archived_run() -> None:
    run = Run()
    run.propose("memory-1", 60)
    run.review("memory-1")
    run.end()
    run.end()
    assert run.s.s.archived
    assert [e.eventType for e in run.advance(61)] == ["memory.expired"]


def test_memory_expiry_timer_decides_nothing_when_early_or_after_revocation() -> None:
    run = Run()
    run.propose("memory-1", 60)
    run.review("memory-1")
    due = run.s.s.memories["memory-1"].expiresAt
    assert run.when(timer("memory_expiry", "memory-1", due - timedelta(milliseconds=1))) == []
    run.revoke("memory-1")
    assert "memory:memory-1" not in wanted_timers(run.s.s)
    assert run.when(timer("memory_expiry", "memory-1", due)) == []


def test_an_unreviewed_candidate_expires_and_its_late_review_is_rejected_memory_expired() -> None:
    run = Run()
    run.propose("memory-1", 30)
    assert [e.eventType for e in run.advance(31)] == ["memory.expired"]
    run.review("memory-1")
    assert run.s.rejected("memory_expired")
    run.revoke("memory-1")
    assert run.s.rejected("memory_expired")


# --- the memory projector on the test driver ----------------------------------------------------

def test_memory_projector_writes_the_entry_at_confirmation_and_tombstones_at_revocation_and_expiry() -> None:
    run, driver = Run(), _driver()
    events = [*run.propose("memory-1", 60), *run.propose("memory-2", 90), *run.propose("memory-3", 90)]
    driver.pipe_batch(_records(run.s.log))
    assert driver.outputs(NAMES.memory) == []  # a candidate is not memory
    events = [*run.review("memory-1"), *run.review("memory-2"), *run.review("memory-3", "reject")]
    driver.pipe_batch(_records(events))
    written = driver.outputs(NAMES.memory)
    prefix = f"acme|capability:payments.refund|{RUN}|".encode()
    assert [r.key for r in written] == [prefix + b"memory-1", prefix + b"memory-2"]
    entry = memory_view.decode(written[0].value or b"")
    held = run.s.s.memories["memory-1"]
    assert (entry.runId, entry.evidence, entry.reviewer, entry.reviewedAt, entry.expiresAt, entry.scope) == (
        RUN, (run.evidence,), "rita", held.decidedAt, held.expiresAt, SCOPE)
    assert {r.partition for r in written} == {partition_for(RUN.encode(), PARTITIONS)}
    driver.pipe_batch(_records([*run.revoke("memory-2"), *run.advance(61)]))
    tail = driver.outputs(NAMES.memory)[2:]
    assert [(r.key, r.value) for r in tail] == [(prefix + b"memory-2", None), (prefix + b"memory-1", None)]
    assert _compacted(driver) == {} and driver.read_store("memories") == {}


def test_memory_projector_dead_letters_a_memory_event_when_it_sits_on_another_partition_than_its_run() -> None:
    """One writer per run (issue 33 item 6): a copy of a confirmation on another partition is
    dead-lettered (`wrong_partition`), never written to the memory topic from there."""
    run, driver = Run(), _driver()
    run.propose("memory-1", 60)
    confirmed = _records(run.review("memory-1"))
    moved = [r._replace(partition=((r.partition or 0) + 1) % PARTITIONS) for r in confirmed]
    driver.pipe_batch([*_records(run.s.log[:-len(confirmed)]), *moved])

    memory_events = [r for r in moved if r.value is not None and codec.decode(r.value).eventType.startswith("memory.")]
    assert memory_events  # the confirmation is among them
    assert [dict(r.headers or [])["dlq.reason"] for r in driver.dead_letters()] == [b"wrong_partition"] * len(
        memory_events)
    assert driver.outputs(NAMES.memory) == []


def _history(runs: int = 3) -> list[EventBase]:
    """Several runs' memories: confirmed, rejected, revoked, expired, one still live."""
    log: list[EventBase] = []
    for i in range(runs):
        run = Run(f"run-mem-{i}")
        run.propose("memory-a", 30)
        run.propose("memory-b", 300)
        run.propose("memory-c", 300)
        run.propose("memory-d", 300)
        run.review("memory-a")
        run.review("memory-b")
        run.review("memory-c", "reject")
        run.review("memory-d")
        run.revoke("memory-d")
        run.end()
        run.advance(40)
        log += run.s.log
    return log


def test_memory_projector_topic_is_byte_identical_to_the_replay_of_the_same_log() -> None:
    records = _records(_history())  # the same memory ids in three runs: the entries stay apart
    driver = _driver()
    for i in range(0, len(records), 7):
        driver.pipe_batch(records[i:i + 7])
    live = _compacted(driver)
    assert live == _replayed(records)
    assert sorted(_entries(live)) == [(f"run-mem-{i}", "memory-b") for i in range(3)]
    assert "memory" in projectors()


def test_replay_cli_default_target_of_the_memory_projection_is_beside_the_memory_topic() -> None:
    from runfacts.cli.projections import _default_target
    from runfacts.settings import KafkaSettings

    assert _default_target(KafkaSettings(topic_prefix="mp"), "memory", 42) == "mp.memory.replay-42"


def test_memory_projector_outputs_are_unchanged_when_commits_abort_and_state_is_lost_on_restart() -> None:
    records = _records(_history())
    clean, rough = _driver(), _driver()
    clean.pipe_batch(records)
    half = len(records) // 2
    rough.abort_next_commit(2)
    for i in range(0, half, 9):
        rough.pipe_batch(records[i:min(i + 9, half)])
    rough.restart(lose_state=True)  # the store rebuilt from its changelog
    rough.abort_next_commit()
    for i in range(half, len(records), 4):
        rough.pipe_batch(records[i:i + 4])
    assert [(r.key, r.value) for r in rough.outputs(NAMES.memory)] == [
        (r.key, r.value) for r in clean.outputs(NAMES.memory)]


def test_memory_projector_dead_letters_bad_bytes_and_ignores_other_events() -> None:
    run, driver = Run(), _driver()
    run.propose("memory-1", 60)
    run.review("memory-1")
    records = _records(run.s.log)
    bad = InputRecord(NAMES.events, records[0].key, b"\xc3\x01not-an-event", partition=records[0].partition)
    driver.pipe_batch([bad, *records])
    (dead,) = driver.dead_letters()
    assert dead.value == bad.value
    assert len(driver.outputs(NAMES.memory)) == 1


def test_memory_projector_runs_under_the_projectors_acl_prefix() -> None:
    assert app_name("runfacts") == "runfacts-projector-memory"
    app = memory_projector(prefix="mp")
    assert app.name == "mp-projector-memory" and app.name.startswith("mp-projector")
    assert set(app.stores) == {"memories"}


def test_memory_entry_round_trips_through_the_topic_record_and_the_store() -> None:
    run = Run()
    run.propose("memory-1", 60)
    run.review("memory-1")
    view: memory_view.MemoryView = {}
    for e in run.s.log:
        view = memory_view.evolve(view, e)
    entry = view["memory-1"]
    assert memory_view.decode(memory_view.schema().frame(memory_view.encode(entry))) == entry
    assert memory_view.from_store(memory_view.to_store(entry)) == entry


# --- the property: never an expired, revoked or unconfirmed entry ---------------------------------

ACTIONS = st.lists(st.one_of(
    st.tuples(st.just("propose"), st.integers(0, 3), st.integers(1, 120)),
    st.tuples(st.sampled_from(["approve", "reject", "revoke"]), st.integers(0, 3), st.just(0)),
    st.tuples(st.just("advance"), st.just(0), st.integers(1, 90)),
    st.tuples(st.just("end"), st.just(0), st.just(0)),
), max_size=25)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ACTIONS)
def test_memory_topic_never_holds_an_expired_revoked_or_unconfirmed_entry(actions: list) -> None:
    run, driver = Run(), _driver()
    driver.pipe_batch(_records(run.s.log))
    for kind, i, n in actions:
        memory = f"memory-{i}"
        if kind == "propose":
            new = run.propose(memory, n, None if i != 3 else "evt-not-of-this-run")
        elif kind == "revoke":
            new = run.revoke(memory)
        elif kind == "advance":
            new = run.advance(n)
        elif kind == "end":
            new = run.end()
        else:
            new = run.review(memory, kind)
        new += run.advance(0)  # the shell fires what fell due while the clock ticked
        driver.pipe_batch(_records(new))
        shown = {m: e for (_, m), e in _entries(_compacted(driver)).items()}
        held = run.s.s.memories
        for memory_id, entry in shown.items():
            assert held[memory_id].status == "confirmed"  # not proposed, rejected, revoked or expired
            assert run.now < entry.expiresAt  # the timer has fired for every expiry up to now
        assert "memory-3" not in shown  # its evidence is not the run's: never confirmed
        assert sorted(shown) == sorted(m for m, c in held.items() if c.status == "confirmed")
        assert sorted(shown) == [e.memoryId for e in memory_view.entries(
            memory_view.view_of_states([run.s.s]), SCOPE, run.now)]
