"""Compensation on the real broker (issue 35): a run with two completed effects is cancelled; the
real decider proposes their compensations newest first, the real dispatcher runs each (its
arguments derived from the original call's arguments and result), and the run ends compensated
with exactly one undo per effect in the ledger."""

from __future__ import annotations

import sqlite3
import uuid
from collections.abc import Iterator

import pytest
from tools_support import REPO, ToolStack

from runfacts.client import Runfacts
from runfacts.demo.stack import DemoOptions
from runfacts.schemas import commands as cmd
from runfacts.schemas.common import Actor
from runfacts.settings import KafkaSettings

pytestmark = pytest.mark.integration
TOOLS = f"{REPO}/tests/integration/compensation_tools.py:registry"
CUSTOMER = Actor(subjectId="customer-7", roles=("user",), authSource="dashboard")


@pytest.fixture(scope="module")
def stack(kafka_bootstrap: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ToolStack]:
    options = DemoOptions(prefix=f"cp-{uuid.uuid4().hex[:10]}", workdir=tmp_path_factory.mktemp("comp"),
                          partitions=2, kafka=KafkaSettings(bootstrap_servers=kafka_bootstrap))
    stack = ToolStack(options, tools=TOOLS)
    try:
        stack.start()
        yield stack
    finally:
        stack.stop()


def ledger(stack: ToolStack) -> list[tuple[str, str, int]]:
    with sqlite3.connect(stack.dir / "ledger.db") as db:
        return [(k, r, a) for k, r, a in db.execute("SELECT kind, ref, amount FROM shop ORDER BY at")]


def test_cancel_compensates_two_completed_effects_in_reverse_order(stack: ToolStack) -> None:
    from compensation_tools import registry

    rf = Runfacts.connect(kafka=stack.options.kafka, prefix=stack.names.prefix, args_store=stack.dir / "harness.db",
                          capabilities=registry)
    try:
        run = rf.start_run(goal="ticket:T-35", summary="Sell one lamp", user_id="customer-7")
        reserve = run.propose("shop.reserve", {"sku": "lamp", "qty": 1}, target="lamp")
        assert reserve.result(timeout=120) == {"reservation_id": f"res-{reserve.id}"}
        charge = run.propose("shop.charge", {"order_id": "o-35", "amount_minor": 4200}, target="o-35")
        assert charge.result(timeout=120) == {"charge_id": f"ch-{charge.id}"}
        assert stack.harness is not None
        stack.harness.send(stack.command(cmd.CancelRun, run.id, CUSTOMER, reason="customer changed their mind"))
        events = stack.wait(run.id, "the compensated run", "run.compensated", timeout=120)
    finally:
        rf.close()
    started = [e.payload.toolCallId for e in events if e.eventType == "compensation.started"]
    assert started == [charge.id, reserve.id]  # newest first
    ended = events[-1] if events[-1].eventType == "run.compensated" else stack.event(run.id, "run.compensated")
    assert list(ended.payload.compensatedToolCalls) == [charge.id, reserve.id]
    assert ledger(stack) == [("reserve", "lamp", 1), ("charge", "o-35", 4200),
                             ("refund", f"ch-{charge.id}", 4200), ("release", f"res-{reserve.id}", 1)]
    assert stack.log is not None
    types = [e.eventType for e in stack.log.of(run.id)]
    assert types.count("tool.call.completed") == 4 and "run.cancelled" not in types
