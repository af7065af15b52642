"""The dispatcher on the real broker: a call it has no adapter for is never committed past
(issue 15 item 3). The engine stops on the record, naming the capability; a dispatcher that
has the adapter later claims the call from the same committed position."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, TopicPartition
from decider_support import CTX, create, propose_lookup
from engine_support import EngineThread, create_topics, produce, read_all, settings

from runfacts.connectors.args_store import ArgsStore
from runfacts.processors.decider import decide
from runfacts.processors.decider.evolve import fold
from runfacts.processors.dispatcher.app import DispatcherSettings, DispatcherShell
from runfacts.processors.engine.api import ProcessingError
from runfacts.schemas import codec
from runfacts.topics import TopicNames

pytestmark = pytest.mark.integration


class NeverCalled:
    """An adapter the test never expects to run (only claims happen without a decider)."""

    def execute(self, request: Any) -> Any:
        raise AssertionError(f"executed {request}")

    def lookup(self, external_request_id: str) -> Any:
        raise AssertionError(f"looked up {external_request_id}")

    def cancel(self, external_request_id: str) -> bool:
        raise AssertionError(f"cancelled {external_request_id}")


def _lookup_run_events() -> list[Any]:
    """A run whose orders.lookup call the decider authorized (no approval needed)."""
    state, events = None, []
    for command in (create(), propose_lookup()):
        out = decide(command, state, CTX)
        state = fold(state, out)
        events += out
    assert events[-1].eventType == "tool.call.authorized"
    return events


def _dispatcher(names: TopicNames, adapters: dict[str, Any], tmp: Path, instance: str,
                bootstrap: str) -> EngineThread:
    shell = DispatcherShell(DispatcherSettings(names=names, catalog=CTX.capabilities, incarnation=1_000,
                                               instance=instance), adapters, ArgsStore.open(tmp / "args.db"))
    return EngineThread(shell.application(), settings(bootstrap, tmp / instance, instance,
                                                      commit_interval_ms=100)).start()


def _committed(bootstrap: str, group: str, topic: str) -> int:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group})
    try:
        [tp] = consumer.committed([TopicPartition(topic, 0)], 10)
        return tp.offset
    finally:
        consumer.close()


def test_dispatcher_stops_without_committing_past_a_call_it_has_no_adapter_for(
        kafka_bootstrap: str, unique: str, tmp_path: Path) -> None:
    names = TopicNames(f"t{unique}")
    create_topics(kafka_bootstrap, [names.events, names.commands, names.dlq], partitions=1)
    events = _lookup_run_events()
    produce(kafka_bootstrap, names.events, [(e.runId.encode(), codec.encode(e)) for e in events])
    authorized_offset = len(events) - 1

    served_elsewhere = _dispatcher(names, {"payments.refund": NeverCalled()}, tmp_path, "d-1",
                                   kafka_bootstrap)
    deadline = time.monotonic() + 60
    while served_elsewhere.error is None and time.monotonic() < deadline:
        time.sleep(0.1)
    served_elsewhere.join()
    error = served_elsewhere.error
    assert isinstance(error, ProcessingError), error
    assert "no adapter for capability orders.lookup" in str(error)
    assert f"@{authorized_offset}" in str(error)  # the record it stopped on
    assert read_all(kafka_bootstrap, names.commands) == []  # no claim, nothing reported
    group = f"t{unique}-dispatcher"
    assert _committed(kafka_bootstrap, group, names.events) <= authorized_offset  # not past it

    serving = _dispatcher(names, {"payments.refund": NeverCalled(), "orders.lookup": NeverCalled()},
                          tmp_path, "d-2", kafka_bootstrap)
    try:
        serving.wait_until(lambda: len(read_all(kafka_bootstrap, names.commands, timeout=1)) >= 1, 60)
    finally:
        serving.stop()
    claims = [codec.decode(m.value()) for m in read_all(kafka_bootstrap, names.commands)]
    assert [(c.commandType, c.payload.toolCallId) for c in claims] == [("tool.call.claim", "tool-call-010")]
