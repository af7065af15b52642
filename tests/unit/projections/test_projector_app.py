"""The live projector on the engine's test driver: byte-identical to `runfacts replay`, exactly once."""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from runfacts.dev.runscript import RunScript, encode_event
from runfacts.partitioning import partition_for
from runfacts.processors.engine.testdriver import InputRecord, TestDriver
from runfacts.projections.audit import reducer as audit
from runfacts.projections.audit.summary import AuditConfig
from runfacts.projections.eventlog import EventReader
from runfacts.projections.facts import Fact, ReadSettings
from runfacts.projections.projector.app import ProjectorShell, app_name
from runfacts.projections.projector.replay import AuditProjector, trajectory_projector
from runfacts.projections.trajectory import model as trajectory_model
from runfacts.projections.trajectory import reducer as trajectory
from runfacts.topics import TopicNames
from runfacts.workers import projector as projector_app

NAMES = TopicNames("pj")
PARTITIONS = 3
Rows = dict[int, list[tuple[bytes, bytes]]]
BYTES_ONLY = ReadSettings(decode=False)


def _log(runs: int = 6, seed: int = 11) -> list[InputRecord]:
    """A scripted log laid out like `produce_log(..., partitions)` lays it out."""
    records = []
    for event in RunScript(seed=seed).log(runs):
        key = event["runId"].encode()
        records.append(InputRecord(NAMES.events, key, encode_event(event),
                                   partition=partition_for(key, PARTITIONS)))
    return records


def _facts(records: list[InputRecord], read: ReadSettings = BYTES_ONLY) -> list[Fact]:
    reader, offsets = EventReader(read), defaultdict(int)
    facts = []
    for r in records:
        assert r.value is not None and r.partition is not None
        facts.append(reader.fact(r.value, r.topic, r.partition, offsets[r.partition]))
        offsets[r.partition] += 1
    return facts


def _replayed(projector: Any, facts: list[Fact]) -> Rows:
    """What `runfacts replay --projection …` writes into a topic: framed bodies per partition."""
    rows: Rows = defaultdict(list)
    prefix = projector.schema.prefix()

    def emit(partition: int, key: str, body: bytes | None) -> None:
        rows[partition].append((key.encode(), prefix + body))  # type: ignore[operator]
    for fact in facts:
        projector.apply(fact, emit)
    projector.finish(emit)
    return dict(rows)


def _live(driver: TestDriver, topic: str) -> Rows:
    rows: Rows = defaultdict(list)
    for record in driver.outputs(topic):
        assert record.key is not None and record.value is not None
        rows[record.partition].append((record.key, record.value))
    return dict(rows)


def _latest(rows: Rows) -> Rows:
    """A compacted topic's view: the last value per key, keys in order of first appearance."""
    out: Rows = {}
    for partition, pairs in rows.items():
        last = dict(pairs)
        out[partition] = list(last.items())
    return out


def _driver(shell: ProjectorShell | None = None) -> TestDriver:
    app = (shell or ProjectorShell(NAMES)).application()
    return TestDriver(app, partitions=PARTITIONS)


def _pipe(driver: TestDriver, records: list[InputRecord], batch: int = 7) -> None:
    for i in range(0, len(records), batch):
        driver.pipe_batch(records[i:i + batch])


def test_projector_audit_is_byte_identical_to_replay_when_fed_the_same_log():
    records = _log()
    driver = _driver()

    _pipe(driver, records)

    live = _live(driver, NAMES.audit)
    assert live == _replayed(AuditProjector(), _facts(records))
    assert sum(len(v) for v in live.values()) == len(records)
    for partition, rows in live.items():  # each record sits on its event's partition
        assert {partition_for(k, PARTITIONS) for k, _ in rows} == {partition}


def test_projector_trajectory_latest_equals_replay_when_fed_the_same_log():
    records = _log()
    driver = _driver()

    _pipe(driver, records, batch=5)

    expected = _replayed(trajectory_projector(), _facts(records, trajectory.READS))
    assert _latest(_live(driver, NAMES.trajectory)) == expected
    assert len(driver.outputs(NAMES.trajectory)) == len(records)  # one update per event


def test_projector_outputs_are_unchanged_when_commits_abort_and_state_is_lost_on_restart():
    records = _log(runs=4, seed=5)
    clean = _driver()
    _pipe(clean, records)
    rough = _driver()

    half = len(records) // 2
    rough.abort_next_commit(2)
    _pipe(rough, records[:half], batch=9)
    rough.restart(lose_state=True)  # stores rebuilt from their changelogs
    rough.abort_next_commit()
    _pipe(rough, records[half:], batch=4)

    for topic in (NAMES.audit, NAMES.trajectory):
        assert _live(rough, topic) == _live(clean, topic)


def test_projector_dead_letters_bad_bytes_when_an_event_does_not_decode():
    records = _log(runs=1)
    bad = InputRecord(NAMES.events, records[0].key, b"\xc3\x01not-an-event", partition=records[0].partition)
    driver = _driver()

    driver.pipe_batch([records[0], bad, *records[1:]])

    (dead,) = driver.dead_letters()
    assert dead.value == bad.value and dict(dead.headers)["dlq.offset"] == b"1"
    stored = [audit.decode(v[10:]) for rows in _live(driver, NAMES.audit).values() for _, v in rows]
    assert [r.sequence for r in stored] == list(range(1, len(records) + 1))
    assert [r.offset for r in stored][:2] == [0, 2]


def test_projector_digests_personal_values_with_the_key_when_one_is_configured(monkeypatch):
    records = _log(runs=1)
    monkeypatch.setenv("RUNFACTS_AUDIT_PII_KEY", "k" * 32)
    driver = TestDriver(projector_app(prefix="pj"), partitions=PARTITIONS)

    _pipe(driver, records)

    keyed = _replayed(AuditProjector(AuditConfig(b"k" * 32)), _facts(records))
    assert _live(driver, NAMES.audit) == keyed
    assert keyed != _replayed(AuditProjector(), _facts(records))


def test_projector_app_name_follows_the_prefix_when_not_default():
    assert app_name("runfacts") == "runfacts-projector"
    assert projector_app(prefix="pj").name == "pj-projector"
    assert set(projector_app().stores) == {"heads", "trajectories"}


def test_trajectory_decode_gives_the_encoded_state_when_round_tripped():
    reader = EventReader(trajectory.READS)
    views: dict[str, trajectory_model.State] = {}
    for offset, event in enumerate(RunScript(seed=9).log(5)):
        fact = reader.fact(encode_event(event), NAMES.events, 0, offset)
        views[fact.run_id] = state = trajectory.evolve(views.get(fact.run_id), fact)
        body = trajectory_model.encode(state)

        assert trajectory_model.decode(body) == state


def test_projector_dead_letters_an_event_when_it_sits_on_another_partition_than_its_run() -> None:
    """One audit chain per run (issue 33 item 6): a copy of a run's event on another partition would
    start a second chain there; it is dead-lettered (`wrong_partition`) and the projector goes on."""
    records = _log(runs=2)
    moved = records[0]._replace(partition=(records[0].partition + 1) % PARTITIONS)  # type: ignore[operator]
    driver = TestDriver(ProjectorShell(NAMES).application(), partitions=PARTITIONS)
    driver.pipe_batch([moved, *records])

    [letter] = driver.dead_letters()
    assert dict(letter.headers or [])["dlq.reason"] == b"wrong_partition"
    audits = driver.outputs(NAMES.audit)
    assert len(audits) == len(records)  # every event in place linked once, the copy never
    assert {(r.key, r.partition) for r in audits} == {(r.key, r.partition) for r in records}
