"""One writer per run on the real broker (issue 33 item 6, docs/semantics.md "One writer per run").

1. A validly signed command re-sent unchanged to another partition of the commands topic (the
   signature covers the bytes, not the partition) is dead-lettered by the task that does not own
   the run (`wrong_partition`): the run's events, state and user view are untouched.
2. A poison record on the dispatcher's events partition (a second `run.created`, as a task that
   did not own the run wrote it before the check) is dead-lettered (`unfoldable_event`); the
   dispatcher goes on and executes the next run's call on that partition.
"""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer
from decider_support import CTX, command, create, propose_lookup
from engine_support import EngineThread, read_all, settings

from runfacts.connectors.args_store import ArgsStore
from runfacts.partitioning import PRODUCER_PARTITIONING, partition_for
from runfacts.processors.decider import decide
from runfacts.processors.decider.app import DeciderShell
from runfacts.processors.dispatcher.adapters import FoundCompleted, ToolCompleted, Verification
from runfacts.processors.dispatcher.app import DispatcherSettings, DispatcherShell
from runfacts.processors.policy.approvals import Keyring, SigningKey
from runfacts.processors.policy.sources import SourceKeys, sign
from runfacts.projections.user_view import publisher
from runfacts.schemas import codec
from runfacts.schemas import commands as cmd
from runfacts.schemas.common import CommandBase
from runfacts.settings import KafkaSettings
from runfacts.topics import TopicNames, apply_topics, runfacts_topics

pytestmark = pytest.mark.integration
PARTITIONS = 6  # runfacts_topics' default partition count
AGENT_KEYS = SourceKeys({"agent-harness": Keyring(keys={"agt-1": SigningKey(b"c" * 32)}, current="agt-1"),
                         "dashboard": Keyring(keys={"dash-1": SigningKey(b"d" * 32)}, current="dash-1")})


def _topics(bootstrap: str, prefix: str) -> TopicNames:
    names = TopicNames(prefix)
    apply_topics(KafkaSettings(bootstrap_servers=bootstrap), runfacts_topics(names))
    return names


def _signed(command: CommandBase) -> tuple[bytes, list[tuple[str, bytes]]]:
    value = codec.encode(command)
    return value, [*codec.headers(command), *sign(AGENT_KEYS, command.actor.authSource, value)]


def _send(bootstrap: str, topic: str, records: list[tuple[bytes, bytes, list[tuple[str, bytes]], int | None]]) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, **PRODUCER_PARTITIONING})
    for key, value, headers, partition in records:
        producer.produce(topic, value, key, headers=headers, **({} if partition is None else {"partition": partition}))
    assert producer.flush(30) == 0


def _wait(condition: Any, what: str, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.3)


def _dead(bootstrap: str, names: TopicNames) -> list[dict[str, str]]:
    return [{k: (v or b"").decode() for k, v in m.headers() or []} for m in read_all(bootstrap, names.dlq, timeout=2)]


def _of(bootstrap: str, topic: str, run: str) -> list[Any]:
    return [m for m in read_all(bootstrap, topic, timeout=2) if m.key() == run.encode()]


def test_signed_command_resent_to_another_partition_is_dead_lettered_and_the_run_untouched(
        kafka_bootstrap: str, unique: str, tmp_path: Path) -> None:
    names = _topics(kafka_bootstrap, f"ow{unique}")
    shell = DeciderShell(names, CTX, views=(publisher(names.user_view),), sources=AGENT_KEYS)
    engine = EngineThread(shell.application(), settings(kafka_bootstrap, tmp_path / "state", "ow-1")).start()
    run = f"ow-{unique}"
    owner = partition_for(run.encode(), PARTITIONS)
    created, completed = create(run=run), command(cmd.CompleteRun, run=run, outcomeRef=f"outcome/{run}")
    try:
        _send(kafka_bootstrap, names.commands, [(run.encode(), *_signed(x), None) for x in (created, completed)])
        _wait(lambda: any(json.loads(m.value())["status"] == "completed"
                          for m in _of(kafka_bootstrap, names.state, run)), "the run to complete")
        events_before = [m.value() for m in _of(kafka_bootstrap, names.events, run)]
        views_before = [m.value() for m in _of(kafka_bootstrap, names.user_view, run)]

        elsewhere = (owner + 1) % PARTITIONS  # the same signed bytes and headers, another partition
        _send(kafka_bootstrap, names.commands, [(run.encode(), *_signed(created), elsewhere)])
        _wait(lambda: any(d.get("dlq.reason") == "wrong_partition" for d in _dead(kafka_bootstrap, names)),
              "the re-sent command's dead letter")
    finally:
        engine.stop()

    [letter] = _dead(kafka_bootstrap, names)
    assert (letter["dlq.partition"], letter["dlq.schema"]) == (str(elsewhere), "runfacts.commands.CreateRun")
    assert f"belongs on partition {owner} of {PARTITIONS}" in letter["dlq.error"]
    assert [m.value() for m in _of(kafka_bootstrap, names.events, run)] == events_before  # one run.created
    assert [m.value() for m in _of(kafka_bootstrap, names.user_view, run)] == views_before
    assert {m.partition() for m in _of(kafka_bootstrap, names.state, run)} == {owner}


class Counting:
    """An orders.lookup adapter that records what it executed."""

    def __init__(self) -> None:
        self.executed: list[str] = []
        self._lock = threading.Lock()

    def execute(self, request: Any) -> ToolCompleted:
        with self._lock:
            self.executed.append(request.tool_call_id)
        return ToolCompleted(result_ref=f"lookup/{request.tool_call_id}", result_hash="h", provider_status="ok",
                             verification=Verification.CONFIRMED_SUCCESS)

    def lookup(self, external_request_id: str) -> FoundCompleted:  # the verification poll
        return FoundCompleted(result_ref=f"lookup/{external_request_id}", result_hash="h", provider_status="ok",
                              verification=Verification.CONFIRMED_SUCCESS)

    def cancel(self, external_request_id: str) -> bool:
        raise AssertionError(f"cancelled {external_request_id}")


def _same_partition_runs(unique: str, n: int) -> list[str]:
    runs = [f"pz-{unique}-{i}" for i in range(300)]
    first = partition_for(runs[0].encode(), PARTITIONS)
    return [r for r in runs if partition_for(r.encode(), PARTITIONS) == first][:n]


def test_dispatcher_goes_on_past_a_poison_record_and_executes_the_next_runs_call(
        kafka_bootstrap: str, unique: str, tmp_path: Path) -> None:
    names = _topics(kafka_bootstrap, f"pz{unique}")
    a, b = _same_partition_runs(unique, 2)
    args = ArgsStore.open(tmp_path / "args.db")
    args.put({"orderId": "order-001"}, "args/lookup")
    adapter = Counting()
    decider = EngineThread(DeciderShell(names, CTX).application(),
                           settings(kafka_bootstrap, tmp_path / "decider", "pz-dec", commit_interval_ms=100)).start()
    dispatcher_settings = DispatcherSettings(names=names, catalog=CTX.capabilities, incarnation=1_000, instance="pz-d")
    shell = DispatcherShell(dispatcher_settings, {"orders.lookup": adapter, "payments.refund": Counting()}, args)
    dispatcher = EngineThread(shell.application(), settings(kafka_bootstrap, tmp_path / "dispatcher", "pz-dsp",
                                                            commit_interval_ms=100)).start()
    try:
        _send(kafka_bootstrap, names.commands, [(a.encode(), codec.encode(x), codec.headers(x), None)
                                                for x in (create(run=a), propose_lookup(call="call-a", run=a))])
        _wait(lambda: adapter.executed == ["call-a"], "run a's call to execute")
        poison = decide(create(run=a), None, CTX)[0]  # a second run.created for run a, by a foreign writer
        _send(kafka_bootstrap, names.events, [(a.encode(), codec.encode(poison), codec.headers(poison), None)])
        _send(kafka_bootstrap, names.commands, [(b.encode(), codec.encode(x), codec.headers(x), None)
                                                for x in (create(run=b), propose_lookup(call="call-b", run=b))])
        _wait(lambda: adapter.executed == ["call-a", "call-b"] or dispatcher.error is not None,
              "run b's call to execute")
        assert dispatcher.error is None, dispatcher.error
        _wait(lambda: any(d.get("dlq.reason") == "unfoldable_event" for d in _dead(kafka_bootstrap, names)),
              "the poison record's dead letter")
    finally:
        dispatcher.stop()
        decider.stop()
        args.close()

    [letter] = _dead(kafka_bootstrap, names)
    assert letter["dlq.app"] == f"pz{unique}-dispatcher" and "run.created" in letter["dlq.error"]
    assert letter["dlq.partition"] == str(partition_for(a.encode(), PARTITIONS))
