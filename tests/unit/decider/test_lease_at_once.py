"""ADR 0011: the authorization carries the lease of the partition's dispatcher.

When the decider knows the dispatcher of the command's partition (`ctx.dispatcher_incarnation`,
the last claimant, remembered by the shell in its store), an authorization (policy or approval)
writes `tool.call.authorized` with that dispatcher's lease and the dispatch itself
(`tool.call.dispatching`, the approval consumed, the budget debited) in the same transaction:
the dispatcher executes on `dispatching` without the claim round trip. Without it, or for a call
whose lost lease could not be settled by a lookup, the dispatcher claims as before.
"""

from __future__ import annotations

from dataclasses import replace

from decider_support import (  # noqa: I001
    CTX,
    DISPATCHER,
    MANIFEST,
    REFUND_KEY,
    Scenario,
    claim,
    command,
    create,
    propose_lookup,
    propose_refund,
    reconciled,
    resume,
    unknown,
)

from runfacts.processors.decider.app import DeciderShell, claimant
from runfacts.processors.dispatcher import core as dispatch
from runfacts.processors.engine.testdriver import TestDriver
from runfacts.processors.policy.capabilities import parse_capabilities
from runfacts.schemas import codec
from runfacts.schemas import commands as cmd
from runfacts.schemas.common import BudgetAmounts
from runfacts.topics import TopicNames

KNOWN = replace(CTX, dispatcher_incarnation=7)
LEASE = dispatch.lease_epoch(7, 1)


def test_policy_authorization_dispatches_at_once_under_the_known_dispatchers_lease() -> None:
    s = Scenario(KNOWN).given(create()).when(propose_lookup())
    s.then("tool.call.proposed", "tool.call.authorized", "tool.call.dispatching", "budget.debited")
    assert s.event("tool.call.authorized").payload.leaseEpoch == LEASE
    p = s.event("tool.call.dispatching").payload
    call = s.s.toolCalls["tool-call-010"]
    assert (p.attempt, p.leaseEpoch, p.externalRequestId, p.idempotencyKey) == (
        1, LEASE, "tool-call-010-a1", call.idempotencyKey)
    assert (call.execution, call.attempts, call.leaseEpoch) == ("dispatching", 1, LEASE)
    assert s.s.budget.used.toolCalls == 1


def test_approval_dispatches_at_once_and_consumes_the_approval() -> None:
    s = Scenario(KNOWN).given(create(), propose_refund()).when(resume())
    s.then("approval.granted", "tool.call.authorized", "run.resumed", "tool.call.dispatching",
           "approval.consumed", "budget.debited")
    assert s.event("tool.call.dispatching").payload.idempotencyKey == REFUND_KEY
    assert s.s.approvals["approval-tool-call-031"].status == "consumed"


def test_a_claim_of_a_call_dispatched_at_once_is_refused_so_one_dispatch_per_call() -> None:
    s = Scenario(KNOWN).given(create(), propose_refund(), resume())
    s.when(claim(epoch=dispatch.lease_epoch(8, 1))).rejected("not_claimable")


def test_unknown_dispatcher_leaves_the_claim_to_the_dispatcher() -> None:
    s = Scenario().given(create()).when(propose_lookup())
    s.then("tool.call.proposed", "tool.call.authorized")
    assert s.event("tool.call.authorized").payload.leaseEpoch is None


def test_a_capability_without_lookup_keeps_the_claim() -> None:
    manifest = MANIFEST.replace('requiredRole = "agent"\n', 'requiredRole = "agent"\nhasLookup = false\n')
    ctx = replace(KNOWN, capabilities=parse_capabilities(manifest))
    s = Scenario(ctx).given(create()).when(propose_lookup())
    s.then("tool.call.proposed", "tool.call.authorized")
    assert s.event("tool.call.authorized").payload.leaseEpoch is None


def test_a_spent_budget_keeps_the_claim_which_then_meets_the_budget() -> None:
    s = Scenario(KNOWN).given(create(budget=BudgetAmounts(toolCalls=1, steps=50)), propose_lookup())
    s.when(propose_lookup("tool-call-011", businessKey="second")).then("tool.call.proposed", "tool.call.authorized")
    assert s.event("tool.call.authorized").payload.leaseEpoch is None


def test_the_dispatcher_does_not_claim_an_authorization_that_carries_a_lease() -> None:
    s = Scenario(KNOWN).given(create()).when(propose_lookup())
    authorized, dispatching = s.last[1], s.last[2]
    assert dispatch.work_for(authorized, s.s, 7) == []
    assert [type(w).__name__ for w in dispatch.work_for(dispatching, s.s, 7)] == ["Execute"]
    lost = dispatch.work_for(dispatching, s.s, 9)  # another incarnation: it may have acted, never call
    assert [type(w).__name__ for w in lost] == ["ReportLost"]


def test_claimant_is_an_accepted_claim_or_a_stale_one_only() -> None:
    s = Scenario().given(create(), propose_refund(), resume())
    c = claim(epoch=dispatch.lease_epoch(5, 1))
    assert claimant(c, Scenario().given(create(), propose_refund(), resume()).when(c).last) == 5
    stale = claim(epoch=dispatch.lease_epoch(4, 1))
    s.given(claim(epoch=dispatch.lease_epoch(6, 1)))
    assert claimant(stale, s.when(stale).last) is None  # not_claimable: it teaches nothing
    lost = Scenario().given(create(), propose_refund(), resume(), claim(epoch=dispatch.lease_epoch(6, 1)),
                            unknown(), reconciled("not_found"))
    older = claim(attempt=2, epoch=dispatch.lease_epoch(4, 2))  # an older incarnation took the partition
    lost.when(older).rejected("stale_lease")
    assert claimant(older, lost.last) == 4
    closed = Scenario().given(create(), propose_lookup())
    assert claimant(command(cmd.RecordReasoning, DISPATCHER, reasoningObjectId="r", goalRef="g",
                            conclusionHash="c" * 64), closed.last) is None


def test_the_shell_learns_the_dispatcher_from_a_claim_and_dispatches_the_next_authorization() -> None:
    from runfacts.dev.crash.workload import Commands
    from runfacts.workers import decide_context

    names = TopicNames("lease")
    driver = TestDriver(DeciderShell(names, decide_context()).application())
    c = Commands("lease")

    def send(command: cmd.CommandBase) -> list[str]:
        before = len(driver.outputs(names.events))
        driver.pipe(names.commands, codec.encode(command), command.runId.encode(), headers=list(codec.headers(command)))
        return [codec.decode(r.value).eventType for r in driver.outputs(names.events)[before:]]

    run = "lease-run-1"
    for command_ in (c.create(run), c.propose(run, "call-1"), c.resume(run, "call-1")):
        send(command_)
    assert send(c.claim(run, "call-1", epoch=42_000))[0] == "tool.call.dispatching"  # incarnation 42
    send(c.propose(run, "call-2", order="order-002"))
    after = send(c.resume(run, "call-2", order="order-002"))
    assert after[-3:] == ["tool.call.dispatching", "approval.consumed", "budget.debited"]
    dispatching = codec.decode(driver.outputs(names.events)[-3].value)
    assert dispatching.payload.leaseEpoch == dispatch.lease_epoch(42, 1)
