"""Decider invariants over random command sequences (hypothesis), coverage and purity."""

from __future__ import annotations

from pathlib import Path

from decider_support import (  # noqa: I001
    OPERATOR,
    USER,
    claim,
    command,
    completed,
    create,
    failed,
    propose_lookup,
    propose_refund,
    reconciled,
    resume,
    timer,
    unknown,
)
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from runfacts.processors.decider.commands.run import HANDLERS
from runfacts.processors.decider.core import decide
from runfacts.processors.decider.evolve import _APPLY, evolve
from runfacts.schemas import commands as cmd
from runfacts.schemas.commands import COMMAND_CLASSES
from runfacts.schemas.common import BudgetAmounts
from runfacts.schemas.events import EVENT_CLASSES

REPO = Path(__file__).resolve().parents[3]
CALLS = ("tool-call-031", "tool-call-032")
HASHES = ("a" * 64, "b" * 64)


def _key_of(state, call: str) -> str:
    return state.toolCalls[call].idempotencyKey if state and call in state.toolCalls else "refund:order-001:x"


def _command(kind: int, call_i: int, n: int, state):
    """One of the commands a run meets, parameterised by small integers."""
    call, args = CALLS[call_i], HASHES[call_i]
    calls = state.toolCalls if state else {}
    attempt = calls[call].attempts if call in calls else 1
    makers = [
        lambda: propose_refund(call, args_hash_=args),
        lambda: resume(approval=f"approval-{call}", args_hash_=args),
        lambda: resume("reject", approval=f"approval-{call}", args_hash_=args),
        lambda: claim(call, attempt=attempt + 1, epoch=n, key=_key_of(state, call)),
        lambda: completed(call, attempt),
        lambda: failed(call, attempt, retryable=bool(n % 2)),
        lambda: unknown(call, attempt),
        lambda: reconciled(("found_completed", "found_failed", "not_found", "still_unknown")[n % 4],
                           call, attempt),
        lambda: command(cmd.RetryToolCall, OPERATOR, toolCallId=call),
        lambda: command(cmd.CancelRun, USER, reason=""),
        lambda: command(cmd.DebitBudget, amounts=BudgetAmounts(tokens=300), actionHash=f"h{n % 2}"),
        lambda: command(cmd.CompleteRun),
        lambda: propose_lookup(f"lookup-{n}"),
        lambda: timer("approval_expiry", f"approval-{call}",
                      state.approvals[f"approval-{call}"].expiresAt
                      if state and f"approval-{call}" in state.approvals else create().issuedAt),
    ]
    if kind >= len(makers):
        return _advance(state, call_i, n, attempt)
    return makers[kind]()


def _advance(state, call_i: int, n: int, attempt: int):
    """The natural next command for a call, so random runs get deep into the track."""
    call, args = CALLS[call_i], HASHES[call_i]
    current = state.toolCalls.get(call) if state else None
    if current is None:
        return propose_refund(call, args_hash_=args)
    if current.execution == "proposed":
        return resume(approval=f"approval-{call}", args_hash_=args)
    if current.execution == "authorized" or current.reconciliation == "not_found":
        return claim(call, attempt=attempt + 1, epoch=current.leaseEpoch + 1, key=current.idempotencyKey)
    if current.execution in ("dispatching", "accepted"):
        return (completed(call, attempt), unknown(call, attempt), failed(call, attempt, retryable=True))[n % 3]
    if current.execution == "result_unknown":
        outcome = ("found_completed", "found_failed", "not_found", "still_unknown")[n % 4]
        return reconciled(outcome, call, attempt)
    return command(cmd.RetryToolCall, OPERATOR, toolCallId=call)


STEPS = st.lists(st.tuples(st.integers(0, 40), st.integers(0, 1), st.integers(1, 9)), max_size=40)


@settings(max_examples=500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(STEPS)
def test_invariants_hold_when_random_commands_arrive(steps) -> None:
    state = None
    first = create(BudgetAmounts(toolCalls=3, tokens=1000))
    state = _apply(state, decide(first, state, _ctx()))
    consumed: set[str] = set()
    for kind, call_i, n in steps:
        before = state
        events = decide(_command(kind, call_i, n, state), state, _ctx())
        state = _apply(state, events)
        _check(before, state, events, consumed)


def _ctx():
    from decider_support import CTX

    return CTX


def _apply(state, events):
    for event in events:
        state = evolve(state, event)
    return state


def _check(before, after, events, consumed: set[str]) -> None:
    changed = [e for e in events if e.eventType != "command.rejected"]
    assert after.version == before.version + len(changed), "version counts applied events"
    for e in events:
        if e.eventType == "approval.consumed":
            assert e.payload.approvalId not in consumed, "an approval is consumed at most once"
            consumed.add(e.payload.approvalId)
    for call_id, old in before.toolCalls.items():
        new = after.toolCalls[call_id]
        if old.execution == "result_unknown":
            assert new.execution not in ("proposed", "authorized"), "result_unknown never goes back"
    used, limits = after.budget.used, after.budget.limits
    for field in ("steps", "toolCalls", "tokens", "wallTimeMs", "costMicros"):
        limit = getattr(limits, field)
        assert limit == 0 or getattr(used, field) <= limit, f"budget {field} overdrawn"
    if before.terminal:
        assert after.status == before.status, "terminal states are final"


def test_every_command_type_has_a_handler_when_contract_is_complete() -> None:
    not_on_a_run = {"run.create", "run.create_child", "subject.erase", "version.drain", "tool.pause", "tool.resume"}
    assert set(HANDLERS) | not_on_a_run == set(COMMAND_CLASSES)


def test_every_event_type_has_an_evolve_case_when_contract_is_complete() -> None:
    no_run = {"run.created", "command.rejected", "subject.erased", "version.drained", "tool.paused", "tool.resumed"}
    assert set(_APPLY) | no_run == set(EVENT_CLASSES)
