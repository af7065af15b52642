"""Two dispatcher instances in one consumer group share the calls (real broker, real workers):
each serves the tools, the claims come from both, and every call is executed exactly once."""

from __future__ import annotations

import json
import sys
import time
from collections import Counter
from collections.abc import Iterator

import pytest
from client_support import AgentStack, agent_stack, approval_of
from confluent_kafka.admin import AdminClient

from runfacts.logread import read_to_end
from runfacts.partitioning import partition_for
from runfacts.processors.dispatcher.app import app_name
from runfacts.schemas import commands as cmd
from runfacts.schemas.codec import Codec
from runfacts.schemas.errors import RecordPosition

pytestmark = pytest.mark.integration
SECOND = "dispatcher-b"


@pytest.fixture(scope="module")
def stack(kafka_bootstrap: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[AgentStack]:
    with agent_stack(kafka_bootstrap, tmp_path_factory.mktemp("twodisp"), approval_ttl_ms=120_000) as running:
        start_second_dispatcher(running)
        wait_members(running, 2)
        yield running


def start_second_dispatcher(stack: AgentStack) -> None:
    """A second `runfacts worker dispatcher` in the same group: own instance id, own state dir."""
    prefix = stack.names.prefix
    args = [sys.executable, "-m", "runfacts.cli", "worker", "dispatcher", "--prefix", prefix,
            "--provider-url", stack.provider_url, "--args-store", stack.dispatcher_args_store(),
            "--capabilities", str(stack.dir / "capabilities.toml")]
    env = stack._env(RUNFACTS_INSTANCE_ID=SECOND,  # noqa: SLF001
                     RUNFACTS_CONSUMER=json.dumps({"group.instance.id": f"{prefix}-{SECOND}"}),
                     RUNFACTS_STATE_DIR=str(stack.dir / "state-b"), RUNFACTS_CONSUME_BATCH="1",
                     RUNFACTS_TRANSACTION_TIMEOUT_MS="30000")
    stack._spawn(SECOND, args, env, f"{SECOND}.log")  # noqa: SLF001


def wait_members(stack: AgentStack, count: int, timeout: float = 120) -> None:
    admin = AdminClient(stack.options.kafka.client_config())
    group = app_name(stack.names.prefix)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        described = admin.describe_consumer_groups([group])[group].result()
        assigned = [m for m in described.members if m.assignment and m.assignment.topic_partitions]
        if len(assigned) >= count and str(described.state).endswith("STABLE"):
            return
        assert stack.wait_exit(SECOND, 0.5) is None, (stack.dir / f"{SECOND}.log").read_text()[-3000:]
    raise AssertionError(f"group {group} did not reach {count} assigned members within {timeout}s")




def test_two_dispatchers_in_one_group_share_the_calls_each_executed_once(stack: AgentStack, unique: str) -> None:
    partitions = stack.options.partitions
    run_ids: list[str] = []
    for n in range(200):  # three runs on each partition, so both instances must work
        run_id = f"share-{n}-{unique}"
        if sum(partition_for(r.encode(), partitions) == partition_for(run_id.encode(), partitions)
               for r in run_ids) < 3:
            run_ids.append(run_id)
    assert len(run_ids) == 3 * partitions
    rf = stack.client()
    try:
        calls = []
        for i, run_id in enumerate(run_ids):
            run = rf.start_run(goal=f"ticket:{run_id}", summary="Refund", user_id="customer-42", run_id=run_id)
            order = f"order-{i}-{unique}"
            calls.append((order, run.propose("payments.refund", {"orderId": order, "amountMinor": 100 + i,
                                                                  "currency": "EUR"}, target=order)))
        for run_id in run_ids:
            rf.decide(approval_of(rf, run_id), "approve", approver="alice", timeout=90)
        values = {order: call.result(timeout=180) for order, call in calls}
    finally:
        rf.close()
    ledger = Counter(r["orderId"] for r in stack.ledger())
    assert {order: ledger[order] for order, _ in calls} == {order: 1 for order, _ in calls}  # executed once
    assert len({v["refundId"] for v in values.values()}) == len(calls)
    codec = Codec()
    records = read_to_end(stack.options.kafka.bootstrap_servers, [stack.names.commands])[stack.names.commands]
    claims = [codec.decode(r.value, RecordPosition(r.topic, r.partition, r.offset), list(r.headers))
              for r in records if r.key is not None and r.key.decode() in run_ids and r.value is not None]
    by_instance = Counter(c.actor.subjectId for c in claims if isinstance(c, cmd.ClaimToolCall))
    assert set(by_instance) == {"dispatcher", SECOND}, by_instance  # both instances served calls
    # one dispatch per call: claimed, or at once with the authorization once the decider knew the
    # partition's dispatcher from a claim (ADR 0011); no instance executed another's
    events = read_to_end(stack.options.kafka.bootstrap_servers, [stack.names.events])[stack.names.events]
    dispatches = Counter(e.payload.toolCallId for e in (codec.decode(r.value) for r in events
                                                         if r.key is not None and r.key.decode() in run_ids)
                         if e.eventType == "tool.call.dispatching")
    assert dispatches == Counter({call.id: 1 for _, call in calls}), dispatches
    assert sum(by_instance.values()) <= len(calls)
