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
from runfacts.projections.trajectory.model import FORMAT_VERSION, as_json, decode, encode, schema, trajectory_of
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
                                         "summary": "Refund 40 EUR to Bob", "businessKey": None,
                                         "display": None, "displayDigest": None},
               turn="t1", reasoning="ro1", capability="payments.refund"),
        _event(6, "approval.required", {"approvalId": "a1", **call, "argsHash": "args1",
                                        "risk": "high", "requiredRole": "approver",
                                        "expiresAt": T0 + 99, "summary": "Allow the refund",
                                        "display": None, "displayDigest": None, "proposedBy": None}),
        _event(7, "approval.granted", {"approvalId": "a1", **call, "argsHash": "args1",
                                       "actor": ACTOR, "displayDigest": None}),
        _event(8, "tool.call.authorized", {**call, "argsHash": "args1", "approvalId": "a1", "leaseEpoch": None}),
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
                                                     "approvalId": None, "leaseEpoch": None}))
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


# -- graph steps (the LangGraph bridge's checkpoint.saved) -----------------------------------

def _proposal(n: int, call: str) -> dict:
    return _event(n, "tool.call.proposed", {"toolCallId": call, "argsHash": f"h-{call}", "argsRef": f"args-{call}",
                                            "target": "order-1", "action": "refund", "risk": "high",
                                            "summary": "Refund", "businessKey": None, "display": None,
                                            "displayDigest": None},
                  capability="payments.refund")


def _required(n: int, call: str) -> dict:
    return _event(n, "approval.required", {"approvalId": f"a-{call}", "toolCallId": call, "argsHash": f"h-{call}",
                                           "risk": "high", "requiredRole": "approver", "expiresAt": T0 + 99,
                                           "summary": "Allow", "display": None, "displayDigest": None,
                                           "proposedBy": None})


def _saved(n: int, node: str) -> dict:
    return _event(n, "checkpoint.saved", {"node": node, "stateHash": f"state-{n}",
                                          "versions": CREATED["versions"]})


def _graph_run() -> list[dict]:
    """As the LangGraph tool node writes it: the step's gated calls are proposed, then the step
    is checkpointed; the node re-runs on resume (already_proposed, the same checkpoint again)."""
    return [
        _event(1, "run.created", CREATED),
        _proposal(2, "c1"), _required(3, "c1"), _proposal(4, "c2"),
        _saved(5, "langgraph:th-1:1f0-aaa"),
        _required(6, "c2"),  # an approval asked after the checkpoint joins the call's graph step
        _event(7, "approval.granted", {"approvalId": "a-c1", "toolCallId": "c1", "argsHash": "h-c1", "actor": ACTOR,
                                       "displayDigest": None}),
        _saved(8, "langgraph:th-1:1f0-aaa"),  # re-saved on resume: the same graph step
        _proposal(9, "c3"),
        _saved(10, "langgraph:th-1:1f0-bbb"),
        _saved(11, "final"),  # the decider's checkpoint of a completed run holds no step: no graph step
    ]


def test_graph_steps_hold_the_calls_and_approvals_of_their_langgraph_step_when_checkpoints_are_saved() -> None:
    record = trajectory_of(_fold(_graph_run()))
    first, second = record.graphSteps
    assert (first.index, first.node, first.checkpointId, first.stateHash, first.savedAt) == (
        1, "langgraph:th-1:1f0-aaa", "1f0-aaa", "state-5", T0 + 5)
    assert (first.steps, first.toolCallIds, first.approvalIds) == ((1, 2), ("c1", "c2"), ("a-c1", "a-c2"))
    assert (second.index, second.checkpointId, second.steps, second.toolCallIds, second.approvalIds) == (
        2, "1f0-bbb", (3,), ("c3",), ())
    assert [(s.action.toolCallId, s.graphStep) for s in record.steps] == [("c1", 1), ("c2", 1), ("c3", 2)]
    assert record.steps[0].approval.outcome == "granted"  # the steps themselves are as before


def test_steps_after_the_last_checkpoint_are_in_no_graph_step_when_none_closed_them() -> None:
    record = trajectory_of(_fold([*_graph_run(), _proposal(12, "c4")]))
    assert record.steps[-1].graphStep is None and len(record.graphSteps) == 2


def test_checkpoint_id_is_read_only_from_a_langgraph_node_when_the_node_is_parsed() -> None:
    assert trajectory.checkpoint_id("langgraph:thread:with:colons:1f0-x") == "1f0-x"
    assert trajectory.checkpoint_id("langgraph:th-1:none") is None  # the bridge's "no checkpoint id"
    assert trajectory.checkpoint_id("node-3") is None and trajectory.checkpoint_id("langgraph:x") is None


def test_graph_steps_round_trip_through_avro_and_json_when_encoded() -> None:
    view = _fold(_graph_run())
    assert schema().decode(schema().frame(encode(view))) == as_json(view)
    assert trajectory_of(decode(encode(view))) == trajectory_of(view)
    assert as_json(view)["graphSteps"][0]["toolCallIds"] == ["c1", "c2"]


def test_a_format_1_body_decodes_with_no_graph_steps_when_the_projector_store_predates_format_2() -> None:
    from runfacts.projections.records import load

    view = _fold(_approval_run())
    old = as_json(view)
    old.pop("graphSteps")
    for step in old["steps"]:
        step.pop("graphStep")
    body = load("Trajectory", 1).write({**old, "formatVersion": 1})
    state = decode(body)
    assert trajectory_of(state) == trajectory_of(view)._replace(formatVersion=FORMAT_VERSION)
    assert trajectory_of(trajectory.evolve(state, facts_of([_saved(15, "langgraph:r1:c")], trajectory.READS)[0])
                         ).graphSteps[0].steps == (1,)
