"""kill -9 of the Kafka Connect worker running Debezium mid-stream, then a restart.

The worker flushes offsets on Connect's default schedule (every 60 s), so the kill lands before
any offset is committed: the restarted connector publishes everything again (initial snapshot,
then the WAL from its slot). Oracle: every command reaches the topic, a repeated one repeats the
same bytes, per run the first deliveries come in outbox order, and the real decider applies each
command once: its events are those of the commands folded once, in order (decide/evolve).
"""

from __future__ import annotations

import threading
import time
from collections import Counter, defaultdict

import psycopg
import pytest
from debezium_support import connect_worker, drop_capture, require_logical
from decider_support import CTX, Scenario, command, create
from engine_support import EngineThread, read_all, settings

from runfacts.connectors.outbox.commands import CommandOutbox
from runfacts.connectors.outbox.debezium import DebeziumOutbox
from runfacts.processors.decider.app import DeciderShell
from runfacts.schemas import codec
from runfacts.schemas import commands as cmd
from runfacts.schemas.common import BudgetAmounts
from runfacts.settings import KafkaSettings
from runfacts.topics import TopicNames, apply_topics, runfacts_topics

pytestmark = [pytest.mark.integration, pytest.mark.postgres, pytest.mark.crash]

RUNS, ROUNDS = 4, 60


def _plan(unique: str) -> list[list]:
    """ROUNDS transactions, each one command for every run: CreateRun first, then reasoning."""
    runs = [f"run-k{unique}-{i}" for i in range(RUNS)]
    plan = [[create(run=r, budget=BudgetAmounts(toolCalls=5, steps=10 * ROUNDS)) for r in runs]]
    for n in range(1, ROUNDS):
        plan.append([command(cmd.RecordReasoning, run=r, reasoningObjectId=f"ro-{r}-{n}", goalRef="goal-1",
                             evidenceRefs=(f"ticket:{n}",), conclusionRef=f"reasoning/{n}",
                             conclusionHash=f"{n:064x}") for r in runs])
    return plan


def _commands_seen(bootstrap: str, topic: str) -> list:
    return read_all(bootstrap, topic, timeout=3)


def test_kill_9_of_the_connect_worker_mid_stream_loses_nothing_and_the_decider_dedupes(
        kafka_bootstrap, postgres_dsn, unique, tmp_path):
    require_logical(postgres_dsn)
    names = TopicNames(f"dbzk{unique}")
    apply_topics(KafkaSettings(bootstrap_servers=kafka_bootstrap), runfacts_topics(names))
    table = f"ob_kill_{unique}"
    connector = DebeziumOutbox(postgres_dsn, names.prefix, table=table)
    plan = _plan(unique)
    expected = [c for tx in plan for c in tx]
    outbox = CommandOutbox(psycopg.connect(postgres_dsn, autocommit=True), names, table)
    workers = connect_worker(tmp_path / "connect", kafka_bootstrap, offset_flush_ms=60_000)
    worker = next(workers)
    try:
        worker.apply(connector)

        half_written = threading.Event()

        def write() -> None:
            for i, tx in enumerate(plan):
                outbox.send(*tx)
                if i + 1 == len(plan) // 2:
                    half_written.set()
                    time.sleep(3.0)  # the kill lands here, with half the plan still to write
                time.sleep(0.08)

        writer = threading.Thread(target=write, daemon=True)
        writer.start()
        deadline = time.monotonic() + 60
        # kill once half the plan is written and Debezium has published some of it (a loaded
        # machine can let Debezium catch up with the writer: the writer's progress, not the
        # topic's, says "mid-stream")
        while not (half_written.is_set() and _commands_seen(kafka_bootstrap, names.commands)):
            assert time.monotonic() < deadline, "Debezium published nothing before the kill"
            time.sleep(0.2)
        before_kill = len(_commands_seen(kafka_bootstrap, names.commands))
        worker.kill9()  # mid-stream: the writer keeps writing while the worker is down
        assert 0 < before_kill < len(expected)
        worker.start()
        worker.apply(connector)
        writer.join(60)
        assert not writer.is_alive()

        ids = {c.commandId for c in expected}
        deadline = time.monotonic() + 120
        while True:
            records = _commands_seen(kafka_bootstrap, names.commands)
            if {dict(m.headers())["commandId"].decode() for m in records} >= ids or time.monotonic() > deadline:
                break
            time.sleep(1)
        seen = [(m.key(), dict(m.headers())["commandId"].decode(), m.value()) for m in records]
        assert {command_id for _, command_id, _ in seen} == ids, "nothing lost"
        by_id = defaultdict(set)
        for key, command_id, value in seen:
            by_id[command_id].add((key, value))
        assert all(len(copies) == 1 for copies in by_id.values()), "a duplicate repeats the same record"
        duplicates = len(seen) - len(ids)
        assert duplicates > 0, "the kill before any offset commit must replay what was published"
        # per run, first deliveries in outbox order (one partition per run key)
        first: dict[str, list[str]] = defaultdict(list)
        for m in sorted(records, key=lambda m: (m.partition(), m.offset())):
            command_id = dict(m.headers())["commandId"].decode()
            run = m.key().decode()
            if command_id not in first[run]:
                first[run].append(command_id)
        assert first == {run: [c.commandId for c in expected if c.runId == run] for run in first}

        # the real decider over the topic with its duplicates: each command applied once
        oracle: dict[str, list[str]] = {}
        for run in first:
            scenario = Scenario(CTX).given(*[c for c in expected if c.runId == run])
            oracle[run] = [e.eventType for e in scenario.log]
        engine = EngineThread(DeciderShell(names, CTX).application(),
                              settings(kafka_bootstrap, tmp_path / "state", "dec-kill")).start()
        want = sum(len(v) for v in oracle.values())
        try:
            engine.wait_until(lambda: len(read_all(kafka_bootstrap, names.events, timeout=1)) >= want, 120)
            engine.wait_until(lambda: bool(read_all(kafka_bootstrap, names.state, timeout=1)), 30)
            time.sleep(2)  # the whole topic, duplicates included, has been decided by now
        finally:
            engine.stop()
        events = [codec.decode(m.value()) for m in read_all(kafka_bootstrap, names.events)]
        by_run: dict[str, list[str]] = defaultdict(list)
        for e in events:
            by_run[e.runId].append(e.eventType)
        assert dict(by_run) == oracle
        assert "command.rejected" not in Counter(e.eventType for e in events)
        print(f"debezium kill -9: {len(ids)} commands, {before_kill} published before the kill, "
              f"{duplicates} duplicates after the restart, {len(events)} events")
    finally:
        outbox.close()
        worker.delete(connector.connector_name)
        next(workers, None)  # stops the worker
        drop_capture(postgres_dsn, connector)
