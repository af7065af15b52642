"""One writer per run, whatever a producer does (docs/semantics.md; issue 33 item 6).

A property test over the run decider's shell on the broker-free `TestDriver` with several
partitions: valid refund stories of a few runs, interleaved with hostile records — a valid command
re-sent unchanged to another partition (what a replay or a CRC32 producer does), a command under
another run's key, ids outside the contract's alphabet, negative budget amounts, garbage bytes.
The oracle: every hostile record is dead-lettered with its reason and nothing else is; no run's
state is written by two partitions' tasks (each run's `run.state` records and `runs` entry live
on its murmur2 partition only); each run has one `run.created`, and its events fold (the
decider's own `evolve`) to the state the decider stored.
"""

from __future__ import annotations

import json
import logging
from collections import Counter
from datetime import UTC, datetime, timedelta

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from runfacts.dev.crash.workload import Commands, Input, refund_story, ticking, valid
from runfacts.partitioning import partition_for
from runfacts.processors.decider.app import DeciderShell
from runfacts.processors.decider.evolve import fold
from runfacts.processors.engine.testdriver import TestDriver
from runfacts.projections.user_view import publisher
from runfacts.schemas import codec
from runfacts.schemas import commands as cmd
from runfacts.schemas.common import BudgetAmounts
from runfacts.topics import TopicNames
from runfacts.workers import decide_context

NAMES = TopicNames("ow")
PARTITIONS = 4
T0 = datetime(2026, 7, 27, 8, 40, tzinfo=UTC)
APP = DeciderShell(NAMES, decide_context(), views=(publisher(NAMES.user_view),)).application()
BAD_IDS = ["", "run\x00x", "run\u202ex", "ru\u200bn", "run-\u0430", "r" * 201, "a b", "run/1"]
logging.getLogger("runfacts.engine").setLevel(logging.ERROR)


def _runs(n: int) -> list[str]:
    return [f"ow-run-{i}" for i in range(n)]


@st.composite
def hostile(draw: st.DrawFn, c: Commands, stories: dict[str, list[cmd.CommandBase]]) -> tuple[Input, int | None, str]:
    """A hostile record, the partition to pipe it to (None: its key's) and the expected dlq.reason."""
    kind = draw(st.sampled_from(["moved", "wrong_key", "bad_run_id", "bad_call_id", "negative", "garbage"]))
    run = draw(st.sampled_from(sorted(stories)))
    owner = partition_for(run.encode(), PARTITIONS)
    if kind == "moved":  # the same bytes and headers (a signature would still verify), another partition
        command = draw(st.sampled_from(stories[run]))
        other = draw(st.sampled_from([p for p in range(PARTITIONS) if p != owner]))
        return valid(command, kind), other, "wrong_partition"
    if kind == "wrong_key":
        command = draw(st.sampled_from(stories[run]))
        key = draw(st.sampled_from([r for r in stories if r != run] + ["someone-else"])).encode()
        return Input(key, codec.encode(command), tuple(codec.headers(command)), kind), None, "key_mismatch"
    if kind == "bad_run_id":
        bad = draw(st.sampled_from(BAD_IDS))
        return valid(c.create(bad), kind), None, "invalid_id"
    if kind == "bad_call_id":
        return valid(c.propose(run, draw(st.sampled_from(BAD_IDS))), kind), None, "invalid_id"
    if kind == "negative":
        amounts = BudgetAmounts(**{draw(st.sampled_from(["steps", "toolCalls", "tokens", "costMicros"])):
                                   -draw(st.integers(1, 10_000))})
        return valid(c.make(cmd.DebitBudget, run, amounts=amounts, actionHash="a" * 16), kind), None, "negative_amount"
    return Input(run.encode(), draw(st.binary(max_size=200)), (), kind), None, ""


@st.composite
def schedule(draw: st.DrawFn) -> tuple[list[tuple[Input, int | None, str]], list[str]]:
    """Every run's story in order, hostile records woven in at random places."""
    c = Commands("ow", ticking(T0, timedelta(seconds=1)))
    runs = _runs(draw(st.integers(2, 5)))
    stories = {run: refund_story(c, run) for run in runs}
    queues = {run: [(valid(x), None, None) for x in story] for run, story in stories.items()}
    bad = draw(st.lists(hostile(c, stories), min_size=1, max_size=12))
    items: list[tuple[Input, int | None, str | None]] = []
    while any(queues.values()) or bad:
        choices = [r for r, q in queues.items() if q] + (["bad"] if bad else [])
        pick = draw(st.sampled_from(choices))
        items.append(bad.pop(0) if pick == "bad" else queues[pick].pop(0))
    return items, runs  # type: ignore[return-value]


@settings(max_examples=150, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow])
@given(schedule())
def test_no_run_is_decided_by_two_tasks_when_records_are_hostile(case: tuple[list, list[str]]) -> None:
    items, runs = case
    driver = TestDriver(APP, partitions=PARTITIONS, start_ms=int(T0.timestamp() * 1000))
    for record, partition, _reason in items:
        driver.pipe(NAMES.commands, record.value, record.key, headers=list(record.headers) or None,
                    partition=partition)

    dead = [{k: (v or b"").decode() for k, v in r.headers or []} for r in driver.dead_letters()]
    expected = Counter(reason for _r, _p, reason in items if reason is not None)
    assert Counter(d.get("dlq.reason", "") for d in dead) == expected  # each hostile record, nothing else
    events = [codec.decode(r.value) for r in driver.outputs(NAMES.events)]
    for run in runs:
        owner = partition_for(run.encode(), PARTITIONS)
        writers = {r.partition for r in driver.outputs(NAMES.state) if r.key == run.encode()}
        assert writers == {owner}, f"{run}: run.state written by the tasks of partitions {writers}"
        holders = {p for p in range(PARTITIONS) if run.encode() in driver.read_store("runs", p)}
        assert holders == {owner}, f"{run}: runs store of partitions {holders}"
        own = [e for e in events if e.runId == run]
        assert [e.eventType for e in own].count("run.created") == 1
        stored = json.loads(driver.read_store("runs", owner)[run.encode()])
        folded = fold(None, own)
        assert folded is not None and (folded.version, folded.status) == (stored["version"], stored["status"])
    assert {e.runId for e in events} == set(runs)  # no event for a run id outside the contract
