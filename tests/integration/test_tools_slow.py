"""Tool execution leaves the engine transaction, on the real broker with real workers: a call
longer than the transaction timeout completes, and a slow call does not hold its partition
(a quick call of another run on the same partition completes first)."""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator

import pytest
from tools_support import REPO, ToolStack

from runfacts.demo_stack import DemoOptions
from runfacts.settings import KafkaSettings

pytestmark = pytest.mark.integration
TRANSACTION_TIMEOUT_MS = 4_000
SLOW_S = 9.0  # > 2 x the transaction timeout


@pytest.fixture(scope="module")
def stack(kafka_bootstrap: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ToolStack]:
    options = DemoOptions(prefix=f"sl-{uuid.uuid4().hex[:10]}", workdir=tmp_path_factory.mktemp("slow"),
                          partitions=1, kafka=KafkaSettings(bootstrap_servers=kafka_bootstrap))
    tools = f"{REPO / 'tests' / 'integration' / 'slow_tools.py'}:registry"  # the file form of --tools
    stack = ToolStack(options, tools=tools, RUNFACTS_TRANSACTION_TIMEOUT_MS=str(TRANSACTION_TIMEOUT_MS))
    try:
        stack.start()
        yield stack
    finally:
        stack.stop()


def test_slow_call_outlives_the_transaction_timeout_without_holding_its_partition(stack: ToolStack) -> None:
    slow, quick = f"run-slow-{uuid.uuid4().hex[:6]}", f"run-quick-{uuid.uuid4().hex[:6]}"
    stack.open_run(slow)
    stack.propose(slow, f"{slow}-report", "slow.report", {"seconds": SLOW_S}, risk="low")
    stack.wait(slow, "the slow call to start", "tool.call.dispatching")
    time.sleep(1.0)
    stack.open_run(quick)
    stack.propose(quick, f"{quick}-echo", "quick.echo", {"text": "hello"}, risk="low")
    stack.wait(quick, "the quick call", "tool.call.completed", timeout=60)
    assert stack.log is not None
    assert "tool.call.completed" not in [e.eventType for e in stack.log.of(slow)], "the quick call waited"
    stack.wait(slow, "the slow call", "tool.call.completed", timeout=90)
    value = json.loads(stack.event(slow, "tool.call.completed").payload.result)
    echo = json.loads(stack.event(quick, "tool.call.completed").payload.result)
    assert value["finished"] - value["started"] >= SLOW_S > 2 * TRANSACTION_TIMEOUT_MS / 1000
    assert echo["finished"] < value["finished"] and echo["echo"] == "hello"
    assert [e.eventType for e in stack.log.of(slow)].count("tool.call.dispatching") == 1
