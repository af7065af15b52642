"""Draining a version (issue 35 item 4), through the decider shell on the broker-free test driver:
a partition that recorded `version.drained` refuses `run.create` on that version, naming it and
the fix; an undo lets runs start again; other partitions (not drained yet) are untouched."""

from __future__ import annotations

from datetime import UTC, datetime

import decider_support as support

from runfacts.partitioning import partition_for
from runfacts.processors.decider.app import DeciderShell
from runfacts.processors.decider.commands.run import DRAIN_RUN_PREFIX, drain_run_ids
from runfacts.processors.engine.testdriver import TestDriver
from runfacts.schemas import codec
from runfacts.schemas import commands as cmd
from runfacts.topics import TopicNames

NAMES = TopicNames("dr")
PARTITIONS = 4
T0_MS = int(datetime(2026, 12, 6, tzinfo=UTC).timestamp() * 1000)


def _driver() -> TestDriver:
    return TestDriver(DeciderShell(NAMES, support.policy_ctx()).application(), partitions=PARTITIONS, start_ms=T0_MS)


def _send(driver: TestDriver, command: cmd.CommandBase) -> list:
    seen = len(driver.outputs(NAMES.events))
    driver.pipe(NAMES.commands, codec.encode(command), command.runId.encode(), headers=list(codec.headers(command)))
    return [codec.decode(r.value) for r in driver.outputs(NAMES.events)[seen:]]


def _drain(driver: TestDriver, partitions: list[int], undo: bool = False) -> None:
    route = support.VERSIONS.modelRoute
    for partition, run_id in enumerate(drain_run_ids("modelRoute", route, PARTITIONS)):
        if partition in partitions:
            events = _send(driver, support.command(cmd.DrainVersion, support.OPERATOR, run=run_id,
                                                   dimension="modelRoute", version=route, undo=undo))
            assert [e.eventType for e in events] == ["version.drained"], events


def test_drain_runs_land_one_on_each_partition_when_the_ids_are_made() -> None:
    ids = drain_run_ids("modelRoute", "route-1", PARTITIONS)
    assert [partition_for(i.encode(), PARTITIONS) for i in ids] == list(range(PARTITIONS))
    assert all(i.startswith(DRAIN_RUN_PREFIX) for i in ids) and ids == drain_run_ids("modelRoute", "route-1", 4)


def test_create_run_is_refused_naming_the_version_and_the_fix_when_its_partition_drained_it() -> None:
    driver = _driver()
    run = "run-drained-1"
    _drain(driver, [partition_for(run.encode(), PARTITIONS)])

    (rejected,) = _send(driver, support.create(run=run))

    assert rejected.eventType == "command.rejected" and rejected.payload.reasonCode == "version_draining"
    detail = rejected.payload.detail
    assert f"modelRoute {support.VERSIONS.modelRoute} is draining" in detail and "--undo" in detail
    other = next(r for r in (f"run-other-{i}" for i in range(50))
                 if partition_for(r.encode(), PARTITIONS) != partition_for(run.encode(), PARTITIONS))
    assert _send(driver, support.create(run=other))[0].eventType == "run.created"  # not drained there


def test_create_run_is_accepted_again_when_the_drain_is_undone() -> None:
    driver = _driver()
    _drain(driver, list(range(PARTITIONS)))
    assert _send(driver, support.create(run="run-a"))[0].payload.reasonCode == "version_draining"

    _drain(driver, list(range(PARTITIONS)), undo=True)

    assert [e.eventType for e in _send(driver, support.create(run="run-b"))] == ["run.created", "run.started"]


def test_drain_is_refused_when_sent_on_a_run_or_by_an_agent() -> None:
    driver = _driver()
    _send(driver, support.create(run="run-x"))
    (on_run,) = _send(driver, support.command(cmd.DrainVersion, support.OPERATOR, run="run-x",
                                              dimension="modelRoute", version="v"))
    assert on_run.payload.reasonCode == "invalid_drain_run"
    (by_agent,) = _send(driver, support.command(cmd.DrainVersion, support.AGENT, run="drain-abc-0",
                                                dimension="modelRoute", version="v"))
    assert by_agent.eventType == "command.rejected" and by_agent.payload.reasonCode != "invalid_drain_run"


def test_migrated_run_resumes_from_the_node_the_operator_named_when_migrate_names_one() -> None:
    from dataclasses import replace

    from runfacts.schemas.common import RunVersions

    newer = RunVersions(**{**support.VERSIONS.model_dump(), "modelRoute": "route-2"})
    s = support.Scenario(replace(support.CTX, current_versions=newer)).given(support.create(versions=newer))
    s.state = s.s.model_copy(update={"versions": support.VERSIONS})  # a run pinned to the old route
    s.when(support.command(cmd.MigrateRun, support.OPERATOR, versions=newer, toNode="after-lookup"))

    assert s.then("run.migrated", "checkpoint.saved").event("checkpoint.saved").payload.node == "after-lookup"
    assert s.s.checkpoint is not None and s.s.checkpoint.versions == newer
