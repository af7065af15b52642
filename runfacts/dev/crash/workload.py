"""Inputs for the crash matrix and the fuzz tests: refund runs, and the ways to get them wrong.

Every command is one the packaged policy lets its actor send (the worker runs with the
packaged policy and capabilities), stamped with a clock the caller gives (the wall clock for
a real broker, a fixed instant for the test driver). `workload()` interleaves many runs'
stories with invalid commands, redeliveries and undecodable records, so one crash lands
in the middle of all of them.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from itertools import count
from typing import Any

from runfacts.processors.decider.context import DEFAULT_VERSIONS
from runfacts.processors.policy.retry import args_hash, idempotency_key
from runfacts.schemas import codec
from runfacts.schemas import commands as cmd
from runfacts.schemas.common import Actor, BudgetAmounts, CommandBase
from runfacts.schemas.models import new_command, payload_class

AGENT = Actor(subjectId="agent-harness", roles=("agent",), authSource="agent-harness")
USER = Actor(subjectId="user-7", roles=("user",), authSource="dashboard")
SUPPORT = Actor(subjectId="alice", roles=("support_agent",), authSource="dashboard")
DISPATCHER = Actor(subjectId="dispatcher-1", roles=("dispatcher",), authSource="dispatcher")
OPERATOR = Actor(subjectId="olga", roles=("operator",), authSource="cli")
REFUND = "payments.refund"


def refund_args(order: str) -> dict[str, Any]:
    return {"orderId": order, "amountMinor": 4200, "currency": "EUR"}


@dataclass(frozen=True)
class Input:
    """One record for the commands topic: key, value (None: a tombstone), headers, what it is."""

    key: bytes
    value: bytes | None
    headers: tuple[tuple[str, bytes], ...] = ()
    label: str = "valid"


class Commands:
    """Command factory: unique ids under `prefix`, time from `clock` (one call per command)."""

    def __init__(self, prefix: str, clock: Callable[[], datetime] | None = None) -> None:
        self.prefix = prefix
        self._ids = count(1)
        self._clock = clock or (lambda: datetime.now(UTC))

    def make(self, cls: type[CommandBase], run: str, actor: Actor = AGENT, *,
             expected: int | None = None, command_id: str | None = None, **payload: Any) -> Any:
        return new_command(cls, commandId=command_id or f"{self.prefix}-c{next(self._ids)}", runId=run,
                           expectedVersion=expected, actor=actor, issuedAt=self._clock(),
                           correlationId=f"{run}-intent", payload=payload_class(cls)(**payload))

    def create(self, run: str, **kw: Any) -> cmd.CreateRun:
        return self.make(cmd.CreateRun, run, USER, goalRef=f"goal:{run}", goalSummary="refund a damaged item",
                         userId="customer-42", budget=BudgetAmounts(toolCalls=5, steps=50),
                         versions=DEFAULT_VERSIONS, **kw)

    def propose(self, run: str, call: str, order: str = "order-001") -> cmd.ProposeToolCall:
        return self.make(cmd.ProposeToolCall, run, toolCallId=call, capabilityId=REFUND,
                         argsHash=args_hash(refund_args(order)), argsRef=f"args/{call}", target=order,
                         action="refund", risk="high", summary=f"Refund 42.00 EUR for {order}")

    def resume(self, run: str, call: str, decision: str = "approve", approval: str = "",
               order: str = "order-001", **kw: Any) -> cmd.ResumeRun:
        return self.make(cmd.ResumeRun, run, SUPPORT, approvalId=approval or f"approval-{call}",
                         decision=decision, argsHash=args_hash(refund_args(order)), **kw)

    def claim(self, run: str, call: str, attempt: int = 1, epoch: int = 1000,
              order: str = "order-001") -> cmd.ClaimToolCall:
        key = idempotency_key(run, "refund", order, args_hash(refund_args(order)))
        return self.make(cmd.ClaimToolCall, run, DISPATCHER, toolCallId=call, attempt=attempt,
                         idempotencyKey=key, externalRequestId=f"{call}-a{attempt}", leaseEpoch=epoch + attempt)

    def unknown(self, run: str, call: str, attempt: int = 1) -> cmd.ReportResultUnknown:
        return self.make(cmd.ReportResultUnknown, run, DISPATCHER, toolCallId=call, attempt=attempt,
                         externalRequestId=f"{call}-a{attempt}", lastError="response_timeout")

    def reconciled(self, run: str, call: str, outcome: str = "found_completed", attempt: int = 1) -> Any:
        return self.make(cmd.ReportReconciled, run, DISPATCHER, toolCallId=call,
                         externalRequestId=f"{call}-a{attempt}", outcome=outcome,
                         resultRef=f"refund/{call}", resultHash="h1")

    def verified(self, run: str, call: str, status: str = "confirmed_success") -> Any:
        return self.make(cmd.ReportVerification, run, DISPATCHER, toolCallId=call, status=status)

    def complete(self, run: str) -> cmd.CompleteRun:
        return self.make(cmd.CompleteRun, run, outcomeRef=f"outcome/{run}")

    def cancel(self, run: str) -> cmd.CancelRun:
        return self.make(cmd.CancelRun, run, USER, reason="customer withdrew")

    def retry(self, run: str, call: str) -> cmd.RetryToolCall:
        return self.make(cmd.RetryToolCall, run, OPERATOR, toolCallId=call)

    def reasoning(self, run: str, n: int = 1) -> cmd.RecordReasoning:
        return self.make(cmd.RecordReasoning, run, reasoningObjectId=f"reasoning-{run}-{n}", goalRef=f"goal:{run}",
                         evidenceRefs=("order:order-001", "policy:refunds-30-days"), conclusionHash="c" * 64)


def valid(command: CommandBase, label: str = "valid") -> Input:
    return Input(command.runId.encode(), codec.encode(command), tuple(codec.headers(command)), label)


def refund_story(c: Commands, run: str) -> list[CommandBase]:
    """A refund run to its end: approval, dispatch, lost response, reconciliation, verification."""
    call = f"call-{run}"
    return [c.create(run), c.reasoning(run), c.propose(run, call), c.resume(run, call), c.claim(run, call),
            c.unknown(run, call), c.reconciled(run, call), c.verified(run, call), c.complete(run)]


def troubles(c: Commands, run: str) -> list[Input]:
    """Invalid commands and bad records aimed at `run` (each ends rejected or dead-lettered)."""
    call = f"call-{run}"
    dup = c.reasoning(run, 2)
    return [
        valid(c.resume(run, call, approval="approval-nope"), "unknown_approval"),
        valid(c.make(cmd.RecordReasoning, run, expected=999, reasoningObjectId="r-stale", goalRef="g",
                     conclusionHash="c" * 64), "stale_version"),
        valid(dup, "valid"), valid(dup, "redelivery"),
        valid(c.retry(run, call), "retry_not_failed"),
        Input(run.encode(), b"\xc3\x01not-avro-at-all", (), "bad_bytes"),
        Input(b"someone-else", codec.encode(c.reasoning(run, 3)), (), "wrong_key"),
        Input(run.encode(), None, (), "tombstone"),
    ]


def workload(prefix: str, runs: int, clock: Callable[[], datetime] | None = None) -> list[Input]:
    """Every run's story with its troubles woven in, runs interleaved round-robin."""
    c = Commands(prefix, clock)
    stories = []
    for i in range(runs):
        run = f"{prefix}-run-{i:03d}"
        story = [valid(x) for x in refund_story(c, run)]
        stories.append(story[:3] + troubles(c, run) + story[3:])
    orphan = c.reasoning(f"{prefix}-no-such-run")
    stories.append([valid(orphan, "orphan"), valid(orphan, "redelivery")])
    return list(_round_robin(stories))


def _round_robin(stories: list[list[Input]]) -> Iterator[Input]:
    longest = max(len(s) for s in stories)
    for i in range(longest):
        for story in stories:
            if i < len(story):
                yield story[i]


def ticking(start: datetime, step: timedelta = timedelta(milliseconds=1)) -> Callable[[], datetime]:
    """A clock that moves `step` per call (a fixed, replayable time line for test drivers)."""
    now = [start]

    def clock() -> datetime:
        now[0] += step
        return now[0]
    return clock
