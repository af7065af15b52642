"""The dispatcher's event stream for `privacy_bench.py`'s dispatcher row, broker-free.

`record(runs, calls, protect)` plays CreateRun and `calls` low-risk proposals per run (no
approval: the decider authorizes at once) through the real decider and the real dispatcher on
two test drivers, with an instant in-memory tool whose result names the customer; it returns
the events the dispatcher was fed, in order. `replay(events, seal)` feeds them to a fresh
dispatcher (same incarnation, so it claims and executes as the first one did) and returns its
CPU seconds: decode, evolve, the core, the tool, building, sealing and encoding the reports.
"""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime, timedelta
from typing import Any

from decider_load import AGENT, CTX, USER, VERSIONS, _command

from runfacts.processors.decider.app import DeciderShell
from runfacts.processors.dispatcher.adapters import ToolCompleted, ToolRequest, Verification
from runfacts.processors.dispatcher.app import DispatcherSettings, DispatcherShell
from runfacts.processors.engine.testdriver import TestDriver
from runfacts.processors.policy.retry import args_hash
from runfacts.schemas import codec
from runfacts.schemas import commands as cmd
from runfacts.schemas.common import BudgetAmounts
from runfacts.topics import TopicNames

NAMES = TopicNames("bench")
T0 = datetime(2026, 12, 2, tzinfo=UTC)
INCARNATION = 7


class InstantLookup:
    """`orders.lookup` answered at once, its result naming the customer (personal data)."""

    def execute(self, request: ToolRequest) -> ToolCompleted:
        order = request.arguments["orderId"]
        result = json.dumps({"orderId": order, "customer": "Ada Lovelace", "email": "ada@example.com",
                             "status": "shipped"}, sort_keys=True)
        return ToolCompleted(result_ref=f"res-{order}", result_hash="h", provider_status="ok",
                             verification=Verification.NOT_OBSERVED, result=result)

    def lookup(self, external_request_id: str) -> Any:
        raise AssertionError("no lookups in this load")

    def cancel(self, external_request_id: str) -> bool:
        return False


class Args:
    """The arguments by reference (`args/<call>` -> its order), trusted."""

    def load_verified(self, ref: str, expected_hash: str) -> dict[str, Any]:
        return {"orderId": ref.rsplit("/", 1)[-1].replace("tc-", "order-")}


def dispatcher(seal: Any) -> TestDriver:
    settings = DispatcherSettings(names=NAMES, catalog=CTX.capabilities, incarnation=INCARNATION,
                                  instance="dispatcher-bench")
    shell = DispatcherShell(settings, {"orders.lookup": InstantLookup()}, Args(),
                            clock=lambda: T0.timestamp(), seal=seal)
    return TestDriver(shell.application(), start_ms=int(T0.timestamp() * 1000))


def _commands(runs: int, calls: int) -> list[Any]:
    out = []
    for r in range(runs):
        run, at = f"run-{r:05d}", T0 + timedelta(seconds=r)
        out.append(_command(cmd.CreateRun, USER, run, 0, at, goalRef="goal-1", goalSummary="look up",
                            userId=f"customer-{r}", budget=BudgetAmounts(toolCalls=2 * calls + 10,
                                                                        steps=20 * calls + 100),
                            versions=VERSIONS))
        for i in range(calls):
            target = f"order-{i:04d}"
            out.append(_command(cmd.ProposeToolCall, AGENT, run, i + 1, at, toolCallId=f"tc-{i}",
                                capabilityId="orders.lookup", argsHash=args_hash({"orderId": target}),
                                argsRef=f"args/tc-{i}", target=target, action="lookup", risk="low",
                                summary=f"look up {target}"))
    return out


def record(runs: int, calls: int, protect: Any) -> list[tuple[bytes, bytes, list[Any]]]:
    """The events the dispatcher sees for this load (the harness's commands through `protect`)."""
    decider = TestDriver(DeciderShell(NAMES, CTX).application(), start_ms=int(T0.timestamp() * 1000))
    disp = dispatcher(protect)
    for c in _commands(runs, calls):
        c = protect(c) if protect is not None else c
        decider.pipe(NAMES.commands, codec.encode(c), c.runId.encode())
    fed, seen_events, seen_commands = [], 0, 0
    while True:
        events = decider.outputs(NAMES.events)[seen_events:]
        for e in events:
            disp.pipe(NAMES.events, e.value, e.key, headers=e.headers)
            fed.append((e.value, e.key, e.headers))
        seen_events += len(events)
        commands = disp.outputs(NAMES.commands)[seen_commands:]
        for c in commands:
            decider.pipe(NAMES.commands, c.value, c.key, headers=c.headers)
        seen_commands += len(commands)
        if not events and not commands:
            return fed


def replay(fed: list[tuple[bytes, bytes, list[Any]]], seal: Any) -> tuple[float, int]:
    """CPU seconds of a fresh dispatcher over `fed`, and how many commands it sent."""
    disp = dispatcher(seal)
    start = time.process_time()
    for value, key, headers in fed:
        disp.pipe(NAMES.events, value, key, headers=headers)
    return time.process_time() - start, len(disp.outputs(NAMES.commands))
