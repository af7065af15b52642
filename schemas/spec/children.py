"""Child runs and evidence (docs/decisions/0012-child-runs.md): the commands
and events of the cross-run protocol, in a spec file of their own.

`events.EVENTS` and `commands.COMMANDS` append these. The protocol: `child.start` (client ->
parent) -> `child.requested` -> `run.create_child` (parent's decider -> child) -> `run.created`,
`run.started`, `run.parent_linked`; `evidence.append` -> `evidence.appended`; `child.report`
(child's decider -> parent) -> `child.reported`, `evidence.merged`, `evidence.conflict_detected`.
"""

from __future__ import annotations

from typing import Any

from runfacts.schemas.spec.fields import ACTOR, BUDGET, INT, STRING, VERSIONS, TypeSpec, enum, f, many, opt, record

CHILD_STATUS = enum(
    "ChildStatus", "Where a child run stands, as its parent knows it.",
    ["requested", "needs_review", "completed", "failed", "cancelled", "refused"], "needs_review")
EVIDENCE_ITEM = record("EvidenceItem", "One piece of evidence: an id, the hash of its content, a reference.", [
    f("evidenceId", STRING, "Stable id of the evidence (the same fact found twice has the same id)."),
    f("hash", STRING, "Hash of the evidence content (e.g. sha256:<hex>); never the content."),
    f("ref", STRING, "Where the content lives (a reference, never raw data)."),
    f("by", STRING, "The run that appended it (its author; merges never change it)."),
])


def _event(name: str, type_name: str, doc: str, fields: list[dict[str, Any]]) -> TypeSpec:
    return TypeSpec("event", name, type_name, 1, doc, tuple(fields))


def _command(name: str, type_name: str, doc: str, fields: list[dict[str, Any]]) -> TypeSpec:
    return TypeSpec("command", name, type_name, 1, doc, tuple(fields))


CHILD_COMMANDS: list[TypeSpec] = [
    _command("StartChildRun", "child.start", "Start a child run with a sub-budget reserved from this run's.", [
        f("childRunId", STRING, "The child's run id (any partition)."),
        f("goalRef", STRING),
        f("goalSummary", STRING, pii=True),
        f("budget", BUDGET, "The sub-budget reserved for the child (its limits)."),
    ]),
    _command("CreateChildRun", "run.create_child", "Create a run as a child (sent by the parent's decider).", [
        f("parentRunId", STRING),
        f("goalRef", STRING),
        f("goalSummary", STRING, pii=True),
        f("userId", STRING, pii=True),
        opt("tenant", STRING),
        f("budget", BUDGET, "The sub-budget the parent reserved."),
        f("versions", VERSIONS),
        f("creator", ACTOR, "The parent's creator: the child's requests stand for the same people."),
    ]),
    _command("ReportChildRun", "child.report", "A child's news for its parent (sent by the child's decider).", [
        f("childRunId", STRING),
        f("status", CHILD_STATUS),
        f("reason", STRING, default=""),
        f("used", BUDGET, "What the child spent (on its end)."),
        many("evidence", EVIDENCE_ITEM, "The child's own evidence (on its end)."),
    ]),
    _command("ReportChildEvidence", "child.report_evidence",
             "Part of an ended child's evidence for its parent, when its ledger does not fit in one record "
             "(sent by the child's decider, in order, before its child.report, which then carries none).", [
        f("childRunId", STRING),
        f("chunk", INT, "This part's number, from 0."),
        f("chunks", INT, "How many parts the child's evidence is sent in."),
        many("evidence", EVIDENCE_ITEM, "The items of this part (bounded in bytes, not only in count)."),
    ]),
    _command("AppendEvidence", "evidence.append", "Append a piece of evidence under this run's id.", [
        f("evidenceId", STRING),
        f("hash", STRING),
        f("ref", STRING),
    ]),
]

CHILD_EVENTS: list[TypeSpec] = [
    _event("ChildRunRequested", "child.requested", "A child run was asked for; its sub-budget is reserved.", [
        f("childRunId", STRING),
        f("goalRef", STRING),
        f("budget", BUDGET, "Reserved from the parent's remaining budget."),
    ]),
    _event("ParentLinked", "run.parent_linked", "This run is a child of parentRunId.", [
        f("parentRunId", STRING),
    ]),
    _event("ChildRunReported", "child.reported", "A child reported: needs review, or its end.", [
        f("childRunId", STRING),
        f("status", CHILD_STATUS),
        f("reason", STRING, default=""),
        f("used", BUDGET, "Charged to the parent on the child's end."),
        f("released", BUDGET, "The reservation given back (the child's end)."),
    ]),
    _event("EvidenceAppended", "evidence.appended", "A piece of evidence under this run's own id.", [
        f("item", EVIDENCE_ITEM),
    ]),
    _event("EvidenceMerged", "evidence.merged", "A child's evidence joined this run's (new or equal items).", [
        f("childRunId", STRING),
        many("items", EVIDENCE_ITEM),
        many("overflow", STRING, "Ids not merged because the run's ledger is full (at most 256 items): "
                                 "the run goes to needs_review."),
    ]),
    _event("EvidenceConflictDetected", "evidence.conflict_detected",
           "A child offered an evidence id this run holds with another hash; nothing was overwritten.", [
               f("childRunId", STRING),
               f("evidenceId", STRING),
               f("heldHash", STRING),
               f("heldBy", STRING),
               f("offeredHash", STRING),
               f("offeredBy", STRING),
           ]),
]
