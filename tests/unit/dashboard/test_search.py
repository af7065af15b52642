"""The run list's search and filters (issue 39), pure: run id, user, capability, status, time
range, error class; combinable, in the URL, and never more than the viewer may see."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from console_support import refund_story
from decider_support import Scenario, claim, create, failed, propose_lookup, propose_refund

from runfacts.dashboard.runlist import ListQuery, RunRow, row_of, run_list
from runfacts.ops.views import Viewer
from runfacts.processors.policy.retry import args_hash, idempotency_key

T0 = datetime(2026, 12, 6, 9, 0, tzinfo=UTC)
OLGA, ALICE = Viewer("olga", ("operator",)), Viewer("alice", ("support_agent",))


def _failed_lookup(run: str, at: datetime, user: str) -> RunRow:
    key = idempotency_key(run, "lookup", "order-001", args_hash({"orderId": "order-001"}))
    s = Scenario().given(create(run=run, at=at), propose_lookup(run=run, at=at),
                         claim("tool-call-010", key=key, run=run, at=at),
                         failed("tool-call-010", retryable=False, error="refused", run=run, at=at))
    return row_of(s.s.model_copy(update={"userId": user}))


@pytest.fixture
def rows() -> list[RunRow]:
    refund = row_of(Scenario().given(*refund_story("run-refund-a", T0)).s)
    late = row_of(Scenario().given(*refund_story("run-refund-b", T0 + timedelta(days=1))).s)
    return [refund, late, _failed_lookup("run-lookup-c", T0, "customer-7")]


def _ids(rows: list[RunRow], viewer: Viewer, **params: str) -> list[str]:
    query = ListQuery.parse(params)
    return sorted(r.run_id for r in run_list(rows, viewer, query, T0 + timedelta(days=2)).rows)


def test_each_filter_alone(rows: list[RunRow]) -> None:
    assert _ids(rows, OLGA, user="customer-7") == _ids(rows, ALICE, user="customer-7") == ["run-lookup-c"]
    assert _ids(rows, OLGA, capability="payments.refund") == ["run-refund-a", "run-refund-b"]
    assert _ids(rows, OLGA, error="refused") == ["run-lookup-c"]
    assert _ids(rows, OLGA, status="completed") == ["run-refund-a", "run-refund-b"]
    assert _ids(rows, OLGA, since="2026-12-07") == ["run-refund-b"]
    assert _ids(rows, OLGA, until="2026-12-06T23:59") == ["run-lookup-c", "run-refund-a"]
    assert _ids(rows, OLGA, q="refund-b") == ["run-refund-b"]


def test_filters_combine_and_travel_in_the_url(rows: list[RunRow]) -> None:
    params = {"capability": "payments", "since": "2026-12-06T00:00", "until": "2026-12-06T12:00",
              "user": "customer-42"}
    assert _ids(rows, OLGA, **params) == ["run-refund-a"]
    query = ListQuery.parse(params)
    assert ListQuery.parse(dict(p.split("=", 1) for p in query.query_string().replace("%3A", ":").split("&"))) == query


def test_an_end_user_finds_only_their_own_runs_whatever_they_ask(rows: list[RunRow]) -> None:
    customer = Viewer("customer-42", ("user",))
    assert _ids(rows, customer) == ["run-refund-a", "run-refund-b"]
    assert _ids(rows, customer, user="customer-7") == []
    assert _ids(rows, customer, error="refused") == []


def test_a_bad_time_or_range_names_the_parameter_and_the_fix() -> None:
    with pytest.raises(ValueError, match="since='yesterday': give a date or a time like 2026-12-06"):
        ListQuery.parse({"since": "yesterday"})
    with pytest.raises(ValueError, match="is not before until"):
        ListQuery.parse({"since": "2026-12-07", "until": "2026-12-06"})


def test_a_row_does_not_repeat_its_status_as_its_reason() -> None:
    from runfacts.dashboard.console import runs_table

    waiting = row_of(Scenario().given(create(run="run-w", at=T0), propose_refund(run="run-w", at=T0)).s)
    html = runs_table(run_list([waiting], OLGA, ListQuery(), T0), T0)
    assert "waiting for approval</span>" in html and "(waiting for approval)" not in html
