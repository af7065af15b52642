"""The dispatcher never stops a partition on a record it must not fold (issue 33 item 6, broker-free).

A second `run.created` in a run's events (what a decider task that did not own the run wrote
before the partition check) used to raise `CorruptLog` out of the handler: the engine stopped,
restarted on the same record, and no tool call of any run on that partition executed. Now it is
dead-lettered (`unfoldable_event`) and the partition goes on; an event on a partition other
than its run's is dead-lettered (`wrong_partition`) before it is folded."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from decider_support import CTX, create, propose_lookup

from runfacts.connectors.args_store import ArgsStore
from runfacts.partitioning import partition_for
from runfacts.processors.decider import decide
from runfacts.processors.decider.evolve import fold
from runfacts.processors.dispatcher.app import DispatcherSettings, DispatcherShell
from runfacts.processors.engine.testdriver import TestDriver
from runfacts.schemas import codec
from runfacts.topics import TopicNames

NAMES = TopicNames("pz")
PARTITIONS = 4


class Unused:
    def execute(self, request: Any) -> Any:
        raise AssertionError(request)

    lookup = cancel = execute


def _authorized(run: str) -> list[Any]:
    """A run whose orders.lookup call the decider authorized (no approval needed)."""
    state, events = None, []
    for command in (create(run=run), propose_lookup(run=run)):
        out = decide(command, state, CTX)
        state, events = fold(state, out), events + out
    return events


def _same_partition_runs(n: int) -> list[str]:
    runs = [f"pz-run-{i}" for i in range(200)]
    first = partition_for(runs[0].encode(), PARTITIONS)
    return [r for r in runs if partition_for(r.encode(), PARTITIONS) == first][:n]


def _driver(tmp: Path) -> TestDriver:
    settings = DispatcherSettings(names=NAMES, catalog=CTX.capabilities, incarnation=1_000, instance="d-1")
    shell = DispatcherShell(settings, {"orders.lookup": Unused(), "payments.refund": Unused()},
                            ArgsStore.open(tmp / "args.db"))
    return TestDriver(shell.application(), partitions=PARTITIONS)


def _pipe(driver: TestDriver, event: Any, partition: int | None = None) -> None:
    driver.pipe(NAMES.events, codec.encode(event), event.runId.encode(), partition=partition)


def _claimed(driver: TestDriver) -> list[str]:
    return [codec.decode(r.value).runId for r in driver.outputs(NAMES.commands)]


def _reasons(driver: TestDriver) -> list[str]:
    return [dict(r.headers or [])[b"dlq.reason".decode()].decode() for r in driver.dead_letters()]


def test_dispatcher_goes_on_past_a_second_run_created_when_its_partition_has_other_runs(tmp_path: Path) -> None:
    a, b = _same_partition_runs(2)
    driver = _driver(tmp_path)
    for event in _authorized(a):
        _pipe(driver, event)
    _pipe(driver, decide(create(run=a), None, CTX)[0])  # a second run.created of run a: poison

    for event in _authorized(b):  # another run on the same partition
        _pipe(driver, event)

    assert _reasons(driver) == ["unfoldable_event"]
    assert "run.created" in dict(driver.dead_letters()[0].headers or [])["dlq.error"].decode()
    assert _claimed(driver) == [a, b]  # b's call is claimed: the partition went on


def test_dispatcher_dead_letters_an_event_when_it_sits_on_another_runs_partition(tmp_path: Path) -> None:
    [run] = _same_partition_runs(1)
    owner = partition_for(run.encode(), PARTITIONS)
    driver = _driver(tmp_path)
    events = _authorized(run)
    for event in events:
        _pipe(driver, event, (owner + 1) % PARTITIONS)

    assert _reasons(driver) == ["wrong_partition"] * len(events)
    assert _claimed(driver) == []
    assert all(run.encode() not in driver.read_store("runs", p) for p in range(PARTITIONS))
