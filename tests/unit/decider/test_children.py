"""Child runs (docs/decisions/0012-child-runs.md): the decide handlers, the evolve cases and the
cross-run outbox, over an in-memory log of several runs (pure; each run decided on its own state
only, the outbox's commands delivered as the commands topic would, duplicates included)."""

from __future__ import annotations

from collections import deque
from typing import Any

import pytest
from decider_support import AGENT, USER, command, create, policy_ctx

from runfacts.processors.decider.commands.children import XRUN_ACTOR, outbox
from runfacts.processors.decider.core import decide_evolve
from runfacts.processors.decider.state import EVIDENCE_MAX, RunState
from runfacts.schemas import commands as cmd
from runfacts.schemas.common import BudgetAmounts, CommandBase, EventBase, EvidenceItem

CTX = policy_ctx()
PARENT, CHILD, OTHER = "run-parent-1", "run-child-1", "run-child-2"
H1, H2 = "sha256:" + "1" * 64, "sha256:" + "2" * 64


class Tree:
    """Runs on one in-memory log: `send` a command, `run` delivers it and every command it causes."""

    def __init__(self) -> None:
        self.states: dict[str, RunState] = {}
        self.events: dict[str, list[EventBase]] = {}
        self.delivered: list[CommandBase] = []
        self.queue: deque[CommandBase] = deque()
        self.held: list[CommandBase] = []

    def send(self, *commands: CommandBase) -> Tree:
        """Each command and everything it causes, before the next."""
        for c in commands:
            self.queue.append(c)
            self.run()
        return self

    def run(self) -> Tree:
        while self.queue:
            self.decide(self.queue.popleft())
        return self

    def decide(self, c: CommandBase, hold: bool = False) -> list[EventBase]:
        before = self.states.get(c.runId)
        events, after = decide_evolve(c, before, CTX)
        self.events.setdefault(c.runId, []).extend(events)
        if after is not None:
            self.states[c.runId] = after
        self.delivered.append(c)
        (self.held if hold else self.queue).extend(outbox(c, before, events, after))
        return events

    def types(self, run: str) -> list[str]:
        return [e.eventType for e in self.events.get(run, [])]

    def last(self, run: str) -> EventBase:
        return self.events[run][-1]

    def __getitem__(self, run: str) -> RunState:
        return self.states[run]


def start(child: str = CHILD, **budget: int) -> cmd.StartChildRun:
    return command(cmd.StartChildRun, AGENT, run=PARENT, childRunId=child, goalRef=f"goal-{child}",
                   goalSummary="collect evidence", budget=BudgetAmounts(**(budget or {"toolCalls": 2, "steps": 10})))


def debit(run: str, **amounts: int) -> cmd.DebitBudget:
    return command(cmd.DebitBudget, AGENT, run=run, amounts=BudgetAmounts(**amounts), actionHash=f"a-{amounts}")


def evidence(run: str, evidence_id: str, digest: str) -> cmd.AppendEvidence:
    return command(cmd.AppendEvidence, AGENT, run=run, evidenceId=evidence_id, hash=digest, ref=f"ref/{evidence_id}")


def finish(run: str) -> cmd.CompleteRun:
    return command(cmd.CompleteRun, AGENT, run=run, outcomeRef="done")


def tree(**limits: int) -> Tree:
    return Tree().send(create(BudgetAmounts(**(limits or {"toolCalls": 5, "steps": 50})), run=PARENT))


def rejected(t: Tree, run: str) -> Any:
    last = t.last(run)
    assert last.eventType == "command.rejected", t.types(run)
    return last.payload


def test_child_start_reserves_sub_budget_and_creates_child_with_it_when_parent_has_enough() -> None:
    t = tree().send(start(toolCalls=2, steps=10))

    assert t.types(PARENT)[-1] == "child.requested"
    assert t[PARENT].budget.reserved == BudgetAmounts(toolCalls=2, steps=10)
    assert t[PARENT].children[CHILD].status == "requested"
    created = t.delivered[-1]
    assert isinstance(created, cmd.CreateChildRun) and created.actor == XRUN_ACTOR
    assert t.types(CHILD) == ["run.created", "run.started", "run.parent_linked"]
    child = t[CHILD]
    assert child.parentRunId == PARENT and child.budget.limits == BudgetAmounts(toolCalls=2, steps=10)
    assert child.createdBy == t[PARENT].createdBy and child.userId == t[PARENT].userId  # the same requesters


@pytest.mark.parametrize(("budget", "reason"), [
    ({"toolCalls": 6, "steps": 10}, "budget_exceeded"),
    ({"toolCalls": 2}, "budget_unbounded"),  # the parent limits steps: the child may not be unlimited
])
def test_child_start_rejected_when_budget_is_not_within_parents_remaining(budget: dict[str, int], reason: str) -> None:
    t = tree().send(start(**budget))

    assert rejected(t, PARENT).reasonCode == reason
    assert t[PARENT].budget.reserved == BudgetAmounts() and CHILD not in t.states


def test_child_start_rejected_when_it_would_take_what_another_child_holds() -> None:
    t = tree().send(start(toolCalls=3, steps=10), start(OTHER, toolCalls=3, steps=10))

    assert rejected(t, PARENT).reasonCode == "budget_exceeded"
    assert OTHER not in t.states


def test_parent_debit_goes_to_review_when_it_would_spend_what_its_children_hold() -> None:
    t = tree().send(start(toolCalls=4, steps=10), debit(PARENT, toolCalls=2))

    assert t.types(PARENT)[-2:] == ["budget.exceeded", "run.needs_review"]
    assert t[PARENT].budget.used.toolCalls == 0


def test_child_end_returns_unspent_budget_and_charges_spent_when_child_completes() -> None:
    t = tree().send(start(toolCalls=2, steps=10), debit(CHILD, steps=3), finish(CHILD))

    assert t.types(PARENT)[-1] == "child.reported"
    reported = t.last(PARENT).payload
    assert reported.status == "completed" and reported.used == BudgetAmounts(steps=3)
    assert reported.released == BudgetAmounts(toolCalls=2, steps=7)
    assert t[PARENT].budget.reserved == BudgetAmounts() and t[PARENT].budget.used == BudgetAmounts(steps=3)
    assert not t[PARENT].live_children()


def test_cross_run_commands_have_no_second_effect_when_delivered_twice() -> None:
    t = tree().send(start(), evidence(CHILD, "ev-1", H1), finish(CHILD))
    copies = [c for c in t.delivered if c.actor == XRUN_ACTOR]
    assert {type(c) for c in copies} == {cmd.CreateChildRun, cmd.ReportChildRun}
    before = {run: list(events) for run, events in t.events.items()}

    for c in copies:  # a redelivery after a crash: the same command ids
        assert t.decide(c) == []
    assert t.events == before


def test_outbox_ids_are_the_same_when_the_same_command_is_decided_again_on_the_same_state() -> None:
    t = tree()
    before, c = t[PARENT], start()
    first = t.decide(c, hold=True)
    again, after = decide_evolve(c, before, CTX)  # a crash before the commit: decided once more

    assert [e.eventId for e in again] == [e.eventId for e in first]
    assert [o.commandId for o in outbox(c, before, again, after)] == [o.commandId for o in t.held]
    assert len(t.held) == 1


def test_child_creation_refused_releases_reservation_when_the_child_id_is_taken() -> None:
    t = tree().send(create(run=OTHER)).send(start(OTHER, toolCalls=2, steps=10))

    assert rejected(t, OTHER).reasonCode == "run_exists"
    reported = t.last(PARENT).payload
    assert t.types(PARENT)[-1] == "child.reported" and reported.status == "refused"
    assert reported.reason.startswith("run_exists")
    assert t[PARENT].budget.reserved == BudgetAmounts() and t[OTHER].parentRunId is None


def test_evidence_append_rejected_when_id_is_held_with_any_hash() -> None:
    t = tree().send(evidence(PARENT, "ev-1", H1), evidence(PARENT, "ev-1", H2))

    assert rejected(t, PARENT).reasonCode == "evidence_exists"
    assert t[PARENT].evidenceItems["ev-1"].hash == H1 and t[PARENT].evidenceItems["ev-1"].by == PARENT


def test_merge_detects_conflict_as_a_fact_and_parent_needs_review_when_child_offers_another_hash() -> None:
    t = tree().send(evidence(PARENT, "ev-1", H1), start(),
                    evidence(CHILD, "ev-1", H2), evidence(CHILD, "ev-2", H1), finish(CHILD))

    assert t.types(PARENT)[-3:] == ["child.reported", "evidence.merged", "evidence.conflict_detected"]
    conflict = t.last(PARENT).payload
    assert (conflict.evidenceId, conflict.heldHash, conflict.heldBy, conflict.offeredHash, conflict.offeredBy) == (
        "ev-1", H1, PARENT, H2, CHILD)
    parent = t[PARENT]
    assert parent.evidenceItems["ev-1"].hash == H1  # never overwritten
    assert parent.evidenceItems["ev-2"].by == CHILD
    assert parent.status == "needs_review" and parent.statusReason == "evidence_conflict"


def test_merge_accepts_equal_items_without_review_when_two_children_found_the_same_evidence() -> None:
    t = tree().send(start(toolCalls=2, steps=10), start(OTHER, toolCalls=2, steps=10),
                    evidence(CHILD, "ev-1", H1), evidence(OTHER, "ev-1", H1), finish(CHILD), finish(OTHER))

    assert "evidence.conflict_detected" not in t.types(PARENT)
    assert t[PARENT].status == "running" and t[PARENT].evidenceItems["ev-1"].by == CHILD


def test_merge_names_overflow_and_goes_to_review_when_ledger_is_full() -> None:
    t = tree().send(*[evidence(PARENT, f"ev-{i}", H1) for i in range(EVIDENCE_MAX)], start(),
                    evidence(CHILD, "extra", H2), finish(CHILD))

    merged = [e for e in t.events[PARENT] if e.eventType == "evidence.merged"][-1].payload
    assert merged.overflow == ("extra",) and t[PARENT].status == "needs_review"
    assert t[PARENT].statusReason == "evidence_overflow"


def test_child_needs_review_surfaces_on_parent_when_child_overdraws_its_sub_budget() -> None:
    t = tree().send(start(toolCalls=2, steps=10), debit(CHILD, steps=11))

    assert t[CHILD].status == "needs_review"
    assert t.types(PARENT)[-1] == "child.reported" and t.last(PARENT).payload.status == "needs_review"
    assert t[PARENT].status == "needs_review" and t[PARENT].statusReason == "child_needs_review"
    assert t[PARENT].budget.reserved == BudgetAmounts(toolCalls=2, steps=10)  # still held: the child lives


def test_cancelling_parent_cancels_children_and_ends_when_their_ends_are_reported() -> None:
    t = tree().send(start(toolCalls=2, steps=10), start(OTHER, toolCalls=2, steps=10))
    t.decide(command(cmd.CancelRun, USER, run=PARENT, reason="user"), hold=True)

    assert t[PARENT].status == "cancelling"  # waits for its children
    cancels = [c for c in t.held if isinstance(c, cmd.CancelRun)]
    assert sorted(c.runId for c in cancels) == [CHILD, OTHER]
    t.queue.extend(t.held)
    t.held.clear()
    t.run()

    assert t[CHILD].status == t[OTHER].status == "cancelled"
    ends = [e.payload.status for e in t.events[PARENT] if e.eventType == "child.reported"]
    assert ends == ["cancelled", "cancelled"] and t.types(PARENT).count("run.cancelled") == 1
    assert t[PARENT].status == "cancelled" and t[PARENT].budget.reserved == BudgetAmounts()


def test_parent_completion_rejected_when_a_child_is_running() -> None:
    t = tree().send(start(), finish(PARENT))

    assert rejected(t, PARENT).reasonCode == "children_running"


def test_child_report_rejected_when_sender_is_not_a_decider() -> None:
    forged = command(cmd.ReportChildRun, AGENT, run=PARENT, childRunId=CHILD, status="completed",
                     used=BudgetAmounts(), evidence=())
    t = tree().send(start(), forged)

    assert rejected(t, PARENT).reasonCode == "forbidden_role"
    assert t[PARENT].children[CHILD].status == "requested"


def test_user_view_says_in_plain_words_which_child_needs_a_person_when_a_child_is_in_review() -> None:
    from runfacts.projections.user_view import status_line

    t = tree().send(start(toolCalls=2, steps=10), debit(CHILD, steps=11))

    assert status_line(t[PARENT], None) == f"Needs a person: child_needs_review (child run {CHILD} needs a person)"


def _long_evidence(run: str, i: int, digest: str = H1) -> cmd.AppendEvidence:
    return command(cmd.AppendEvidence, AGENT, run=run, evidenceId=f"ev-{i:03d}-" + "i" * 90, hash=digest,
                   ref=f"s3://evidence-bucket/{i:03d}/" + "r" * 1000)


def test_full_ledger_with_long_refs_reaches_the_parent_in_parts_each_within_the_record_limit() -> None:
    from runfacts.processors.decider.app import InputLimits
    from runfacts.processors.decider.commands.children import evidence_chunks
    from runfacts.schemas.codec import Codec

    t = tree().send(start(), *[_long_evidence(CHILD, i) for i in range(EVIDENCE_MAX)])
    assert rejected_none(t, CHILD) and len(t[CHILD].evidenceItems) == EVIDENCE_MAX
    whole = cmd.ReportChildRun(commandId="x", runId=PARENT, actor=XRUN_ACTOR, issuedAt=t[CHILD].updatedAt,
                               correlationId="c", payload=cmd.ReportChildRunPayload(
                                   childRunId=CHILD, status="completed", used=BudgetAmounts(),
                                   evidence=tuple(t[CHILD].evidenceItems.values())))
    limit = InputLimits().max_record_bytes
    assert len(Codec().encode(whole)) > limit  # one report (the old protocol) would be dead-lettered
    assert len(evidence_chunks(whole.payload.evidence)) > 1

    t.send(finish(CHILD))
    sent = [c for c in t.delivered if c.runId == PARENT and c.commandType.startswith("child.report")]
    parts = [c for c in sent if c.commandType == "child.report_evidence"]
    assert len(parts) > 1 and sent[-1].commandType == "child.report" and not sent[-1].payload.evidence
    assert [p.payload.chunk for p in parts] == list(range(len(parts)))
    assert all(p.payload.chunks == len(parts) for p in parts)
    assert all(InputLimits().check(c) is None and len(Codec().encode(c)) < limit * 0.6 for c in sent)  # each fits
    parent = t[PARENT]
    assert len(parent.evidenceItems) == EVIDENCE_MAX and {i.by for i in parent.evidenceItems.values()} == {CHILD}
    assert parent.children[CHILD].status == "completed" and parent.status == "running"
    assert "command.rejected" not in t.types(PARENT)


def rejected_none(t: Tree, run: str) -> bool:
    return "command.rejected" not in t.types(run)


def test_evidence_part_delivered_twice_merges_once_and_a_conflict_in_a_later_part_is_a_fact() -> None:
    t = tree().send(_long_evidence(PARENT, 200, H1), start(),
                    *[_long_evidence(CHILD, i, H1 if i != 200 else H2) for i in range(EVIDENCE_MAX - 1)])
    t.send(finish(CHILD))
    parts = [c for c in t.delivered if c.commandType == "child.report_evidence"]
    before = t[PARENT]
    assert t.decide(parts[0]) == []  # redelivered: its id is in the dedupe window
    assert t[PARENT] == before
    conflict = next(e for e in t.events[PARENT] if e.eventType == "evidence.conflict_detected").payload
    assert (conflict.heldBy, conflict.offeredBy, conflict.offeredHash) == (PARENT, CHILD, H2)
    held = next(k for k in before.evidenceItems if k.startswith("ev-200-"))
    assert before.evidenceItems[held].hash == H1 and before.statusReason == "evidence_conflict"  # never overwritten
    assert len(before.evidenceItems) == EVIDENCE_MAX - 1  # ev-200 held once, the parent's


def test_evidence_part_refused_unless_a_decider_sends_it_for_a_child() -> None:
    t = tree().send(start())
    part = cmd.ReportChildEvidencePayload(childRunId=CHILD, chunk=0, chunks=1,
                                          evidence=(EvidenceItem(evidenceId="e", hash=H1, ref="r", by=CHILD),))
    t.send(command(cmd.ReportChildEvidence, AGENT, run=PARENT, **part.model_dump()))
    assert rejected(t, PARENT).reasonCode == "forbidden_role"
    t.send(command(cmd.ReportChildEvidence, XRUN_ACTOR, run=PARENT, **{**part.model_dump(), "childRunId": OTHER}))
    assert rejected(t, PARENT).reasonCode == "unknown_child"
