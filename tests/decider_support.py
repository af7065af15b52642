"""Given/when/then for the run decider: command factories and a scenario that folds state.

    s = Scenario().given(create(), propose_refund())
    s.when(resume(approve=True)).then("approval.granted", "tool.call.authorized", "run.resumed")
    s.when(resume()).rejected("approval_already_decided")
"""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta
from itertools import count
from typing import Any

from runfacts.processors.decider.core import DecideContext, decide
from runfacts.processors.decider.evolve import fold
from runfacts.processors.decider.security import policy_checks
from runfacts.processors.decider.state import RunState
from runfacts.processors.policy.access import load_policy
from runfacts.processors.policy.approvals import Keyring
from runfacts.processors.policy.capabilities import parse_capabilities
from runfacts.processors.policy.retry import args_hash, idempotency_key
from runfacts.schemas import commands as cmd
from runfacts.schemas.common import Actor, BudgetAmounts, CommandBase, EventBase, RunVersions

T0 = datetime(2026, 7, 27, 8, 40, tzinfo=UTC)
RUN = "run-20260727001"
VERSIONS = RunVersions(stateSchema="1", modelRoute="route-a", toolManifest="tm-1", policy="p-1")
USER = Actor(subjectId="user-7", roles=("user",), authSource="dashboard")
AGENT = Actor(subjectId="agent-harness", roles=("agent",), authSource="agent-harness")
DISPATCHER = Actor(subjectId="dispatcher-1", roles=("dispatcher",), authSource="dispatcher")
SUPPORT = Actor(subjectId="alice", roles=("support_agent", "user"), authSource="dashboard")
OPERATOR = Actor(subjectId="olga", roles=("operator",), authSource="cli")
TIMER = Actor(subjectId="run-decider", roles=("decider",), authSource="decider-timer")

MANIFEST = """
[[capability]]
capabilityId = "payments.refund"
risk = "high"
requiredRole = "support_agent"
needsApproval = true
reconciliationDeadlineMs = 600000
approvalTtlMs = 900000
[capability.retry]
maxAttempts = 3
baseBackoffMs = 200
maxBackoffMs = 5000
deadlineMs = 30000

[[capability]]
capabilityId = "orders.lookup"
risk = "low"
requiredRole = "agent"
needsApproval = false
reconciliationDeadlineMs = 60000
[capability.retry]
maxAttempts = 3
baseBackoffMs = 100
maxBackoffMs = 1000
deadlineMs = 10000
"""
CTX = DecideContext(capabilities=parse_capabilities(MANIFEST), current_versions=VERSIONS)


def policy_ctx(keyring: Keyring | None = None) -> DecideContext:
    """CTX enforcing the packaged access policy (and signed approvals when a keyring is given)."""
    return replace(CTX, **policy_checks(load_policy(catalog=CTX.capabilities), keyring))
REFUND_ARGS = {"orderId": "order-001", "amountMinor": 4200, "currency": "EUR"}
REFUND_HASH = args_hash(REFUND_ARGS)
REFUND_KEY = idempotency_key(RUN, "refund", "order-001", REFUND_HASH)

_ids = count(1)
_clock = {"now": T0}


def tick(seconds: float = 1) -> datetime:
    """Advance the test clock and return it."""
    _clock["now"] += timedelta(seconds=seconds)
    return _clock["now"]


def command(cls: type[CommandBase], actor: Actor = AGENT, *, run: str = RUN, at: datetime | None = None,
            expected: int | None = None, command_id: str | None = None, **payload: Any) -> Any:
    """A command of `cls` with a fresh id and the next clock tick."""
    payload_cls = cls.model_fields["payload"].annotation
    return cls(commandId=command_id or f"cmd-{next(_ids)}", runId=run, expectedVersion=expected,
               actor=actor, issuedAt=at or tick(), correlationId="refund-intent-031",
               payload=payload_cls(**payload))


def create(budget: BudgetAmounts | None = None, **kw: Any) -> cmd.CreateRun:
    return command(cmd.CreateRun, USER, goalRef="goal-1", goalSummary="refund order-001",
                   userId="customer-42", budget=budget or BudgetAmounts(toolCalls=5, steps=50),
                   versions=kw.pop("versions", VERSIONS), **kw)


def propose_refund(call: str = "tool-call-031", args_hash_: str = REFUND_HASH, **kw: Any) -> cmd.ProposeToolCall:
    return command(cmd.ProposeToolCall, toolCallId=call, capabilityId="payments.refund",
                   argsHash=args_hash_, argsRef=f"args/{call}", target="order-001", action="refund",
                   risk="high", summary="Refund 42.00 EUR for order-001", **kw)


def propose_lookup(call: str = "tool-call-010", **kw: Any) -> cmd.ProposeToolCall:
    return command(cmd.ProposeToolCall, toolCallId=call, capabilityId="orders.lookup",
                   argsHash=args_hash({"orderId": "order-001"}), argsRef="args/lookup",
                   target="order-001", action="lookup", risk="low", summary="look up order-001", **kw)


def resume(decision: str = "approve", approval: str = "approval-tool-call-031", actor: Actor = SUPPORT,
           args_hash_: str = REFUND_HASH, **kw: Any) -> cmd.ResumeRun:
    return command(cmd.ResumeRun, actor, approvalId=approval, decision=decision, argsHash=args_hash_, **kw)


def claim(call: str = "tool-call-031", attempt: int = 1, epoch: int = 1, key: str = REFUND_KEY,
          **kw: Any) -> cmd.ClaimToolCall:
    return command(cmd.ClaimToolCall, DISPATCHER, toolCallId=call, attempt=attempt, idempotencyKey=key,
                   externalRequestId=f"payment-request-{call}-{attempt}", leaseEpoch=epoch, **kw)


def report(cls: type[CommandBase], call: str = "tool-call-031", attempt: int = 1, **kw: Any) -> Any:
    return command(cls, DISPATCHER, toolCallId=call, attempt=attempt,
                   externalRequestId=kw.pop("request", f"payment-request-{call}-{attempt}"), **kw)


def completed(call: str = "tool-call-031", attempt: int = 1, **kw: Any) -> cmd.ReportToolCompleted:
    return report(cmd.ReportToolCompleted, call, attempt, resultRef="refund-1", resultHash="h1", **kw)


def failed(call: str = "tool-call-031", attempt: int = 1, retryable: bool = True,
           error: str = "rate_limited", **kw: Any) -> cmd.ReportToolFailed:
    return report(cmd.ReportToolFailed, call, attempt, errorClass=error, retryable=retryable, **kw)


def unknown(call: str = "tool-call-031", attempt: int = 1, **kw: Any) -> cmd.ReportResultUnknown:
    return report(cmd.ReportResultUnknown, call, attempt, lastError="response_timeout", **kw)


def reconciled(outcome: str, call: str = "tool-call-031", attempt: int = 1, **kw: Any) -> cmd.ReportReconciled:
    return command(cmd.ReportReconciled, DISPATCHER, toolCallId=call,
                   externalRequestId=f"payment-request-{call}-{attempt}", outcome=outcome, **kw)


def timer(kind: str, target: str, at: datetime) -> cmd.FireTimer:
    return command(cmd.FireTimer, TIMER, at=at, timerId=f"{kind}:{target}", kind=kind, targetId=target, dueAt=at)


class Scenario:
    """Folds given commands through decide/evolve; `when` decides one more."""

    def __init__(self, ctx: DecideContext = CTX) -> None:
        self.ctx = ctx
        self.state: RunState | None = None
        self.log: list[EventBase] = []
        self.last: list[EventBase] = []

    def given(self, *commands: CommandBase) -> Scenario:
        for c in commands:
            events = decide(c, self.state, self.ctx)
            rejected = [e for e in events if e.eventType == "command.rejected"]
            assert not rejected, f"given {c.commandType} was rejected: {rejected[0].payload}"
            self._apply(events)
        return self

    def when(self, c: CommandBase) -> Scenario:
        self.last = decide(c, self.state, self.ctx)
        self._apply(self.last)
        return self

    def _apply(self, events: list[EventBase]) -> None:
        self.log.extend(events)
        self.state = fold(self.state, events)

    def then(self, *types: str) -> Scenario:
        assert [e.eventType for e in self.last] == list(types)
        return self

    def rejected(self, reason: str) -> Any:
        assert [e.eventType for e in self.last] == ["command.rejected"], self.last
        payload = self.last[0].payload
        assert payload.reasonCode == reason, payload
        return payload

    def event(self, event_type: str) -> Any:
        matches = [e for e in self.last if e.eventType == event_type]
        assert len(matches) == 1, [e.eventType for e in self.last]
        return matches[0]

    @property
    def s(self) -> RunState:
        assert self.state is not None
        return self.state


def approved_refund() -> Scenario:
    """A run whose refund was proposed and approved (authorized, not dispatched)."""
    return Scenario().given(create(), propose_refund(), resume())


def dispatched_refund() -> Scenario:
    return approved_refund().given(claim())


LOOKUP_KEY = "unused"


def menu_command(state: Any, i: int) -> Any:
    """Command number `i` of a menu over both tracks (for random walks: hypothesis draws `i`)."""
    call = f"tool-call-{i % 3}"
    at = tick()
    options = [
        lambda: propose_refund(call),
        lambda: propose_lookup(f"lookup-{i % 3}"),
        lambda: resume("approve", approval=f"approval-{call}"),
        lambda: resume("reject", approval=f"approval-{call}"),
        lambda: claim(call, key=idempotency_key_of(state, call)),
        lambda: claim(f"lookup-{i % 3}", key=idempotency_key_of(state, f"lookup-{i % 3}")),
        lambda: completed(call),
        lambda: completed(f"lookup-{i % 3}"),
        lambda: failed(call, retryable=bool(i % 2)),
        lambda: unknown(call),
        lambda: reconciled(("found_completed", "found_failed", "not_found", "still_unknown")[i % 4], call),
        lambda: command(cmd.RetryToolCall, OPERATOR, toolCallId=call),
        lambda: timer("approval_expiry", f"approval-{call}", at + timedelta(days=2)),
        lambda: command(cmd.StopRun, USER, reason="user_requested"),
        lambda: command(cmd.CompleteRun, outcomeRef="s"),
        lambda: command(cmd.DebitBudget, amounts=BudgetAmounts(tokens=10 * i), actionHash=f"model:{i % 2}"),
    ]
    return options[i % len(options)]()


def idempotency_key_of(state: Any, call: str) -> str:
    """The call's key as the run derived it (a made-up one for a call it does not hold)."""
    found = state.toolCalls.get(call) if state is not None else None
    return found.idempotencyKey if found is not None else LOOKUP_KEY
