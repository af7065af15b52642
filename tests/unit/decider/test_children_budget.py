"""The parent is never overdrawn (SEMANTICS §7, §16): hypothesis over random sequences of
child starts (reserve), debits of the parent and of its children (spend), child ends
(release) and redelivered cross-run commands, on the in-memory log of test_children."""

from __future__ import annotations

from decider_support import USER, command
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from runfacts.processors.decider.commands.children import POOLS, XRUN_ACTOR
from runfacts.schemas import commands as cmd
from runfacts.schemas.common import BudgetAmounts

from .test_children import PARENT, Tree, debit, finish, start, tree

KIDS = ("run-kid-a", "run-kid-b", "run-kid-c")
LIMITS = {"toolCalls": 6, "steps": 40, "costMicros": 1000}

op = st.one_of(
    st.tuples(st.just("start"), st.sampled_from(KIDS), st.integers(0, 8), st.integers(0, 30), st.integers(0, 600)),
    st.tuples(st.just("spend"), st.sampled_from((PARENT, *KIDS)), st.integers(0, 3), st.integers(0, 12),
              st.integers(0, 400)),
    st.tuples(st.just("end"), st.sampled_from(KIDS), st.sampled_from(("complete", "fail", "cancel")),
              st.just(0), st.just(0)),
    st.tuples(st.just("redeliver"), st.integers(0, 50), st.just(0), st.just(0), st.just(0)),
    st.tuples(st.just("cancel_parent"), st.just(""), st.just(0), st.just(0), st.just(0)),
)


def _apply(t: Tree, step: tuple) -> None:
    kind, who, a, b, c = step
    if kind == "start":
        t.send(start(who, toolCalls=a, steps=b, costMicros=c))
    elif kind == "spend" and who in t.states:
        t.send(debit(who, toolCalls=a, steps=b, costMicros=c))
    elif kind == "end" and who in t.states:
        ends = {"complete": finish(who), "fail": command(cmd.FailRun, run=who, errorClass="x", detail=""),
                "cancel": command(cmd.CancelRun, USER, run=who, reason="")}
        t.send(ends[a])
    elif kind == "redeliver":
        copies = [d for d in t.delivered if d.actor == XRUN_ACTOR]
        if copies:
            t.send(copies[who % len(copies)])
    elif kind == "cancel_parent":
        t.send(command(cmd.CancelRun, USER, run=PARENT, reason=""))


def _check(t: Tree) -> None:
    parent = t[PARENT]
    live = parent.live_children()
    for field in POOLS:
        limit = getattr(parent.budget.limits, field)
        used, reserved = getattr(parent.budget.used, field), getattr(parent.budget.reserved, field)
        assert reserved == sum(getattr(k.reserved, field) for k in live), field
        assert limit == 0 or used + reserved <= limit, f"{field}: {used} used + {reserved} reserved > {limit}"
        spent_by_live = sum(getattr(t[k.childRunId].budget.used, field) for k in live if k.childRunId in t.states)
        assert limit == 0 or used + spent_by_live <= limit, f"{field}: the tree spent more than the parent's limit"


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(op, max_size=30))
@example([("start", "run-kid-a", 4, 20, 500), ("spend", PARENT, 3, 12, 400)])  # the parent spending what a child holds
def test_parent_budget_is_never_overdrawn_when_children_reserve_spend_and_release_in_any_order(steps) -> None:
    t = tree(**LIMITS)
    for step in steps:
        _apply(t, step)
        _check(t)
    for kid in KIDS:  # every child that ended has given its reservation back
        if kid in t.states and t[kid].terminal:
            assert not t[PARENT].children[kid].live
    if all(not k.live for k in t[PARENT].children.values()):
        assert t[PARENT].budget.reserved == BudgetAmounts()
