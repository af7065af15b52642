"""The eval trajectory: given events, then the steps an evaluator sees (no personal data)."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from projection_support import facts_of, run_values

from runfacts.dev.runscript import RunScript
from runfacts.projections.facts import Fact
from runfacts.projections.trajectory import reducer as trajectory
from runfacts.projections.trajectory.model import FORMAT_VERSION, as_json, encode, schema, trajectory_of
from runfacts.schemas.catalog import default_catalog

T0 = 1_714_564_800_000


def _event(n: int, event_type: str, payload, turn=None, reasoning=None, capability=None):
    return {"eventId": f"r1/{n}", "eventType": event_type, "runId": "r1", "turnId": turn,
            "producer": "run-decider", "reasoningObjectId": reasoning, "capabilityId": capability,
            "correlationId": "c", "causationId": None,
            "schemaVersion": default_catalog().by_type[event_type].version,
            "occurredAt": T0 + n, "payload": payload}


def _fold(events) -> trajectory.State:
    view = trajectory.initial
    for fact in facts_of(events, trajectory.READS):
        view = trajectory.evolve(view, fact)
    return view


ACTOR = {"subjectId": "alice@example.com", "roles": ["approver"], "tenant": None,
         "authSource": "oidc"}
BUDGET = {"steps": 1, "toolCalls": 0, "tokens": 100, "wallTimeMs": 5, "costMicros": 300}
CREATED = {"goalRef": "goal/1", "goalSummary": "Refund Bob", "userId": "bob@example.com",
           "tenant": None, "budget": BUDGET, "actor": ACTOR,
           "versions": {"stateSchema": "s", "modelRoute": "m", "toolManifest": "t", "policy": "p"}}


def _approval_run():
    call = {"toolCallId": "c1"}
    ext = {**call, "attempt": 1, "externalRequestId": "x1"}
    return [
        _event(1, "run.created", CREATED),
        _event(2, "turn.started", {"turnNumber": 1}, turn="t1"),
        _event(3, "reasoning.recorded", {"goalRef": "goal/1", "evidenceRefs": ["doc/1"],
                                         "conclusionHash": "h1", "conclusionRef": None},
               turn="t1", reasoning="ro1"),
        _event(4, "budget.debited", {"amounts": BUDGET, "actionHash": "a"}, turn="t1"),
        _event(5, "tool.call.proposed", {**call, "argsHash": "args1", "argsRef": "ref",
                                         "target": "order-1", "action": "refund", "risk": "high",
                                         "summary": "Refund 40 EUR to Bob", "businessKey": None},
               turn="t1", reasoning="ro1", capability="payments.refund"),
        _event(6, "approval.required", {"approvalId": "a1", **call, "argsHash": "args1",
                                        "risk": "high", "requiredRole": "approver",
                                        "expiresAt": T0 + 99, "summary": "Allow the refund"}),
        _event(7, "approval.granted", {"approvalId": "a1", **call, "argsHash": "args1",
                                       "actor": ACTOR}),
        _event(8, "tool.call.authorized", {**call, "argsHash": "args1", "approvalId": "a1"}),
        _event(9, "tool.call.dispatching", {**call, "attempt": 1, "idempotencyKey": "k",
                                            "externalRequestId": "x1", "leaseEpoch": 1}),
        _event(10, "tool.call.result_unknown", {**ext, "lastError": "timeout"}),
        _event(11, "tool.call.reconciled", {**call, "externalRequestId": "x1",
                                            "outcome": "found_completed", "resultRef": "res",
                                            "resultHash": "rh", "result": '{"ok":true}'}),
        _event(12, "verification.updated", {**call, "status": "confirmed_success",
                                            "evidenceRef": "ledger/1"}),
        _event(13, "run.completed", {"outcomeRef": "out/1", "pendingVerifications": []}),
        _event(14, "feedback.recorded", {"feedbackId": "f1", "rating": 5, "comment": "great",
                                         "targetTurnId": None, "targetToolCallId": "c1",
                                         "targetReasoningObjectId": None, "actor": ACTOR}),
    ]


def test_trajectory_has_one_step_per_reasoned_action_when_a_call_needs_approval() -> None:
    view = _fold(_approval_run())
    record = trajectory_of(view)
    assert (record.status, record.goalRef, record.outcome) == ("completed", "goal/1", "out/1")
    assert record.eventCount == 14 and record.lastEventId == "r1/14"
    [step] = record.steps
    assert (step.index, step.turnId, step.turnNumber) == (1, "t1", 1)
    assert step.reasoning.reasoningObjectId == "ro1" and step.reasoning.evidenceRefs == ("doc/1",)
    assert (step.action.toolCallId, step.action.argsHash, step.action.capabilityId) == (
        "c1", "args1", "payments.refund")
    assert (step.approval.outcome, step.approval.decidedByRoles) == ("granted", ("approver",))
    assert (step.execution.status, step.execution.reconciliation, step.execution.resultRef) == (
        "completed", "found_completed", "res")
    assert step.verification.status == "confirmed_success"
    assert [(f.feedbackId, f.target) for f in step.feedback] == [("f1", "tool_call")]
    assert step.budgetUsed.tokens == 100 and record.budgetUsed.tokens == 100


def test_trajectory_marks_approval_not_required_when_policy_authorized_the_call() -> None:
    events = _approval_run()[:5]
    events[4]["payload"]["risk"] = "low"
    events.append(_event(6, "tool.call.authorized", {"toolCallId": "c1", "argsHash": "args1",
                                                     "approvalId": None}))
    step = trajectory_of(_fold(events)).steps[0]
    assert (step.approval.outcome, step.execution.status) == ("not_required", "authorized")


def test_trajectory_keeps_run_level_feedback_when_it_targets_nothing() -> None:
    events = [*_approval_run()[:2], _event(3, "feedback.recorded", {
        "feedbackId": "f9", "rating": 2, "comment": None, "targetTurnId": None,
        "targetToolCallId": None, "targetReasoningObjectId": None, "actor": ACTOR})]
    record = trajectory_of(_fold(events))
    assert [(f.feedbackId, f.target, f.rating) for f in record.feedback] == [("f9", "run", 2)]


def test_evolve_raises_when_an_event_type_has_no_rule() -> None:
    fact = facts_of(_approval_run()[:1], trajectory.READS)[0]
    odd = Fact(fact.topic, 0, 1, {**fact.event, "eventType": "run.teleported"}, b"", b"")
    with pytest.raises(ValueError, match="no rule for event type 'run.teleported'"):
        trajectory.evolve(trajectory.evolve(None, fact), odd)


def test_every_contract_event_type_is_classified_when_the_catalog_is_read() -> None:
    from runfacts.schemas.catalog import default_catalog

    types = {e.type_name for e in default_catalog().current.values() if e.kind == "event"}
    assert types == set(trajectory.HANDLERS) | trajectory.IGNORED


def test_encoded_trajectory_decodes_to_the_json_export_when_round_tripped() -> None:
    view = _fold(_approval_run())
    framed = schema().frame(encode(view))
    assert schema().decode(framed) == as_json(view)
    assert as_json(view)["formatVersion"] == FORMAT_VERSION
    json.dumps(as_json(view))  # JSON-serialisable as is


@settings(max_examples=15, deadline=None)
@given(st.integers(1, 10_000))
def test_trajectory_holds_no_personal_data_when_runs_are_random(seed) -> None:
    events = list(RunScript(seed=seed).log(2))
    personal = {e["payload"][k] for e in events for k in ("userId", "goalSummary", "summary",
                                                          "comment") if k in e["payload"]}
    personal |= {e["payload"]["actor"]["subjectId"] for e in events
                 if (e["payload"].get("actor") or None)}
    views: dict[str, trajectory.State] = {}
    for fact in facts_of(events, trajectory.READS):
        views[fact.run_id] = trajectory.evolve(views.get(fact.run_id), fact)
    for view in views.values():
        text = json.dumps(as_json(view))
        data = encode(view)
        assert not [p for p in personal if p in text or p.encode() in data]


def test_fold_is_deterministic_when_the_same_log_is_replayed() -> None:
    events = run_values(seed=12, runs=3)
    first = [_state_bytes(events), _state_bytes(events)]
    assert first[0] == first[1]


def _state_bytes(events) -> list[bytes]:
    views: dict[str, trajectory.State] = {}
    for fact in facts_of(events, trajectory.READS):
        views[fact.run_id] = trajectory.evolve(views.get(fact.run_id), fact)
    return [encode(v) for v in views.values()]
