"""The user view: derived from run state only; personal fields only in auditor views."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from runfacts.dev.runscript import RunScript, encode_event
from runfacts.processors.decider.evolve import evolve
from runfacts.projections.user_view import ROLES, as_json, encode, publisher, schema, user_view
from runfacts.schemas.codec import Codec
from runfacts.schemas.pii import pii_paths

CODEC = Codec()
MARKER = st.text(alphabet="QXZJKVW", min_size=10, max_size=14).map(lambda s: f"pii-{s}")


def _fold(events: list[dict[str, Any]]):
    state = None
    for event in events:
        state = evolve(state, CODEC.decode(encode_event(event)))
    return state


def _run(seed: int, upto: int | None = None) -> list[dict[str, Any]]:
    events = list(RunScript(seed=seed).events(0))
    return events if upto is None else events[:upto]


def _set_pii(event: dict[str, Any], value: str) -> list[str]:
    """Replace every personal field of the event with `value`-derived text; return them."""
    written = []
    for i, path in enumerate(pii_paths(event["eventType"])):
        *parents, leaf = path.split(".")
        node: Any = event
        for key in parents:
            node = node.get(key) if node is not None else None
        if node is not None and node.get(leaf) is not None:
            node[leaf] = f"{value}-{i}"
            written.append(node[leaf])
    return written


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(1, 100_000), st.integers(5, 80), MARKER)
def test_personal_fields_never_appear_in_user_or_operator_views_when_runs_are_random(
        seed, upto, marker) -> None:
    events = _run(seed, upto)
    personal = [v for n, e in enumerate(events) for v in _set_pii(e, f"{marker}{n}")]
    state = _fold(events)
    for role in ("user", "operator"):
        view = user_view(state, role)
        if view is None:
            continue
        text, data = json.dumps(as_json(view)), encode(view)
        assert [p for p in personal if p in text or p.encode() in data] == []
    auditor = user_view(state, "auditor")
    if auditor is not None:
        assert auditor.auditor.userId in personal


def _waiting_run() -> list[dict[str, Any]]:
    for seed in range(1, 200):
        events = _run(seed)
        for i, e in enumerate(events):
            if e["eventType"] == "run.paused":
                return events[:i + 1]
    raise AssertionError("no scripted run pauses for approval")


def test_view_shows_an_approval_banner_when_the_run_waits_for_approval() -> None:
    events = _waiting_run()
    state = _fold(events)
    view = user_view(state, "user")
    proposed = next(e for e in reversed(events) if e["eventType"] == "tool.call.proposed")
    required = events[-2]["payload"]
    assert view.status == "waiting_for_approval" and not view.isBusy and view.canStop
    banner = view.approvalBanner
    assert (banner.approvalId, banner.risk, banner.allowedDecisions) == (
        required["approvalId"], "high", ("approve", "reject"))
    assert banner.asks == f"refund on {proposed['payload']['target']} (high risk)"
    assert banner.summary is None and user_view(state, "auditor").approvalBanner.summary
    assert view.statusLine == f"Waiting for approval: {banner.asks}"
    assert view.version == state.version == len(events)
    assert view.lastUpdated == events[-1]["occurredAt"]


def test_view_offers_retry_when_a_retryable_call_failed_in_a_running_run() -> None:
    for seed in range(1, 400):
        events = _run(seed)
        i = next((i for i, e in enumerate(events) if e["eventType"] == "tool.call.failed"
                  and e["payload"]["retryable"]), None)
        if i is not None:
            break
    view = user_view(_fold(events[:i + 1]), "user")
    assert view.canRetry == (events[i]["payload"]["toolCallId"],)
    assert view.isBusy and view.status == "running"


def test_view_is_none_when_the_run_is_archived() -> None:
    for seed in range(1, 100):
        events = _run(seed)
        if events[-1]["eventType"] == "run.archived":
            break
    assert all(user_view(_fold(events), role) is None for role in ROLES)
    assert user_view(_fold(events[:-1]), "user").status in ("completed", "failed")


def test_operator_view_adds_operations_detail_when_asked() -> None:
    state = _fold(_run(3))
    operator = user_view(state, "operator")
    assert operator.operator is not None and operator.auditor is None
    assert operator.operator.budgetUsed["steps"] == state.budget.used.steps
    assert user_view(state, "user").operator is None


def test_view_raises_when_the_role_is_unknown() -> None:
    with pytest.raises(ValueError, match="unknown role 'admin'"):
        user_view(_fold(_run(3)), "admin")  # type: ignore[arg-type]


def test_encoded_view_decodes_to_its_json_when_round_tripped() -> None:
    for role in ROLES:
        view = user_view(_fold(_waiting_run()), role)
        assert schema().decode(schema().frame(encode(view))) == as_json(view)


def test_publisher_emits_the_framed_view_then_a_tombstone_when_the_run_is_archived() -> None:
    for seed in range(1, 100):
        events = _run(seed)
        if events[-1]["eventType"] == "run.archived":
            break
    publish = publisher("runfacts.view.user")
    [(topic, key, value)] = publish(_fold(events[:-1]))
    assert (topic, key) == ("runfacts.view.user", events[0]["runId"].encode())
    assert schema().decode(value)["version"] == len(events) - 1
    assert publish(_fold(events)) == [("runfacts.view.user", key, None)]
