"""The approvals inbox says who asked (issue 39): the proposer of the call (from its
approval.required fact, trimmed by role), for whom, and why."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from decider_support import Scenario, create, propose_refund

from .test_console import _login, client  # noqa: F401  (the app over fed feeds)

T0 = datetime(2026, 12, 6, 9, 0, tzinfo=UTC)
WAITING = "run-waiting-1"


@pytest.fixture
def stories() -> dict[str, Scenario]:
    return {WAITING: Scenario().given(create(run=WAITING, at=T0), propose_refund(run=WAITING, at=T0))}


def test_inbox_row_says_who_asked_for_whom_and_why(client):  # noqa: F811
    _login(client, "alice")
    page = client.get("/approvals").text
    row = page.split(f'data-run="{WAITING}"')[1].split("</tr>")[0]
    assert 'class="asked-by">asked by [redacted] (agent via agent-harness)</span>' in row, row
    assert "for [redacted]" in row and "payments.refund at high risk needs a support agent&#x27;s approval" in row
    assert "customer-42" not in row
