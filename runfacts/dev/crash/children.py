"""The crash row of child runs (docs/decisions/0012-child-runs.md): the decider dies mid-protocol.

Parents start children (3 partitions: most pairs cross partitions); the decider is killed -9
after producing a batch (its `run.create_child` commands included) before the commit, restarts,
and goes on; the children spend, append evidence and end (one parent is cancelled instead), and
the decider is killed -9 at the same point again, at its second commit of that phase (children
reporting, parents merging). Besides the matrix's oracle (events
and state = the fold of the committed commands log, no duplicate), `protocol_problems` checks the
protocol end to end: every cross-run command the folded facts call for (`children.outbox`) is
in the committed commands log exactly once and nothing else is, every child was created once for
its parent, and every parent got its whole reservation back with its children's spend charged.
"""

from __future__ import annotations

from collections import Counter
from typing import TYPE_CHECKING

from runfacts.dev.crash.procs import wait_until
from runfacts.dev.crash.workload import USER, Commands, Input, valid
from runfacts.logread import LogRecord, read_to_end
from runfacts.processors.decider.app import effective_command
from runfacts.processors.decider.commands.children import XRUN_SOURCE, outbox
from runfacts.processors.decider.core import decide_evolve
from runfacts.processors.decider.state import RunState
from runfacts.schemas import commands as cmd
from runfacts.schemas.common import BudgetAmounts, CommandBase
from runfacts.schemas.errors import InvalidInput

if TYPE_CHECKING:
    from runfacts.dev.crash.oracle import Expected
    from runfacts.dev.crash.stage import Stage

H1, H2 = "sha256:" + "1" * 64, "sha256:" + "2" * 64


def tree_ids(prefix: str, runs: int) -> list[tuple[str, list[str]]]:
    """(parent, children) per tree: two children for even trees, one for odd."""
    return [(f"{prefix}-p{i}", [f"{prefix}-p{i}-k{j}" for j in range(2 if i % 2 == 0 else 1)]) for i in range(runs)]


def phase_one(c: Commands, trees: list[tuple[str, list[str]]]) -> list[Input]:
    """Parents created, children started (each reserving steps 5, toolCalls 1)."""
    out: list[CommandBase] = []
    for parent, kids in trees:
        out.append(c.create(parent))
        out.append(c.make(cmd.AppendEvidence, parent, evidenceId="ev-shared", hash=H1, ref=f"ref/{parent}"))
        out += [c.make(cmd.StartChildRun, parent, childRunId=k, goalRef=f"goal:{k}", goalSummary="evidence",
                       budget=BudgetAmounts(steps=5, toolCalls=1, costMicros=0)) for k in kids]
    return [valid(x) for x in out]


def phase_two(c: Commands, trees: list[tuple[str, list[str]]]) -> list[Input]:
    """Children spend and append evidence; they complete, except tree 1's, whose parent is cancelled
    (tree 0's first child offers another hash for the parent's `ev-shared`: a conflict)."""
    out: list[CommandBase] = []
    for i, (parent, kids) in enumerate(trees):
        for j, kid in enumerate(kids):
            out.append(c.make(cmd.DebitBudget, kid, amounts=BudgetAmounts(steps=2 + j), actionHash=f"a-{kid}"))
            digest = H2 if (i, j) == (0, 0) else H1
            out.append(c.make(cmd.AppendEvidence, kid, evidenceId="ev-shared" if (i, j) == (0, 0) else f"ev-{kid}",
                              hash=digest, ref=f"ref/{kid}"))
            if i != 1:
                out.append(c.make(cmd.CompleteRun, kid, outcomeRef=f"out/{kid}"))
        if i == 1:
            out.append(c.make(cmd.CancelRun, parent, USER, reason="user_requested"))
    return [valid(x) for x in out]


def children_created(trees: list[tuple[str, list[str]]]):  # noqa: ANN201
    return lambda e: all(k in e.states for _, kids in trees for k in kids)


def trees_done(trees: list[tuple[str, list[str]]]):  # noqa: ANN201
    return lambda e: all(p in e.states and not e.states[p].live_children() for p, _ in trees)


def protocol_problems(stage: Stage, trees: list[tuple[str, list[str]]]) -> list[str]:
    """See the module docstring."""
    commands = read_to_end(stage.bootstrap, [stage.names.commands])[stage.names.commands]
    called_for, logged = _fold(stage, commands)
    problems = [f"cross-run command {i} in the log {logged[i]}x, called for {called_for[i]}x"
                for i in sorted(set(called_for) | set(logged)) if logged[i] != 1 or called_for[i] != 1]
    return problems + tree_problems(stage.expected, trees)


def _fold(stage: Stage, records: list[LogRecord]) -> tuple[Counter[str], Counter[str]]:
    states: dict[str, RunState] = {}
    called_for: Counter[str] = Counter()
    logged: Counter[str] = Counter()
    for record in records:
        try:
            command = stage.shell.deserialize(record.value, list(record.headers))
        except InvalidInput:
            continue
        if command.actor.authSource == XRUN_SOURCE:
            logged[command.commandId] += 1
        command = effective_command(command, record.timestamp_ms, stage.shell.max_backdate_ms)
        before = states.get(command.runId)
        events, after = decide_evolve(command, before, stage.shell.ctx)
        if after is not None:
            states[command.runId] = after
        called_for.update(o.commandId for o in outbox(command, before, events, after))
    return called_for, logged


def tree_problems(expected: Expected, trees: list[tuple[str, list[str]]]) -> list[str]:
    """Each parent: nothing reserved, its children's spend charged; each child linked to it."""
    problems = []
    for parent, kids in trees:
        state = expected.states.get(parent)
        if state is None:
            problems.append(f"{parent}: no state")
            continue
        spent = sum(state.children[k].used.steps for k in kids if k in state.children)
        if state.budget.reserved != BudgetAmounts() or state.budget.used.steps != spent:
            problems.append(f"{parent}: reserved {state.budget.reserved}, used {state.budget.used.steps} != {spent}")
        for kid in kids:
            child = expected.states.get(kid)
            if child is None or child.parentRunId != parent or not child.terminal:
                problems.append(f"{kid}: not an ended child of {parent} ({child and child.status})")
    return problems


def children_scenario(row, stage: Stage):  # noqa: ANN001, ANN201
    """The row (see the module docstring); `rows.children_row` wraps it into a Finished."""
    c = Commands(stage.prefix)
    trees = tree_ids(stage.prefix, max(stage.lab.runs, 4))
    stage.provision().send(phase_one(c, trees))
    decider = stage.worker("decider", guarantee=row.guarantee)
    marker = decider.start(row.point, row.after).wait_killed()
    decider.start()
    stage.settle(ready=children_created(trees))
    decider.kill()  # idle: nothing lost; the next incarnation meets phase two armed
    stage.send(phase_two(c, trees))
    second = decider.start(row.point, row.after + 1).wait_killed()  # mid phase two: children spend, end, report
    decider.start()
    stage.settle(ready=trees_done(trees))
    wait_until(lambda: "assigned partitions" in decider.log().read_text(errors="replace"), 60,
               "the last decider up (it then ends on SIGTERM)", 0.2)
    return f"{marker}; then {second}", protocol_problems(stage, trees)
