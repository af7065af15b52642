"""The dashboard shows what an approver approves (issue 33, item 2): the inbox and the run page
list each approval's arguments as the tool's schema names them, personal values only to
auditors; a decision from the dashboard signs the display digest the approver saw."""

from __future__ import annotations

import base64
import json
from types import SimpleNamespace

from runfacts.client.outcomes import Entry
from runfacts.dashboard import app as dashboard_app
from runfacts.dashboard.console import inbox_table, run_console
from runfacts.dashboard.runlist import inbox, row_of
from runfacts.dashboard.runpage import run_page
from runfacts.ops.views import Viewer
from runfacts.processors.decider.security import approval_token_check
from runfacts.processors.policy.approvals import parse_keyring
from runfacts.security.identity import Identity

from ..decider.test_argument_display import args, propose, scenario

ALICE = Viewer("alice", ("support_agent",))
AUDREY = Viewer("audrey", ("auditor", "support_agent"))
KEYS = json.dumps({"current": "k1", "keys": {"k1": base64.b64encode(b"k" * 32).decode()}})


def waiting() -> tuple:
    s = scenario().given(propose(args(9_000)))
    return s, [Entry(i, e) for i, e in enumerate(s.log)]


def test_inbox_lists_the_arguments_and_masks_personal_values_for_a_support_agent() -> None:
    s, _ = waiting()
    [row] = inbox([row_of(s.s)], ALICE)
    assert row.arguments == ('account = "acct-700"', "amount_cents = 9000 cents", "customer = [personal] (personal)")
    html = inbox_table([row], s.s.updatedAt, "tok")
    assert "amount_cents = 9000 cents" in html and "Ada" not in html
    [audited] = inbox([row_of(s.s)], AUDREY)
    assert 'customer = "Ada Lovelace" (personal)' in audited.arguments


def test_run_page_shows_the_approvals_arguments_trimmed_by_role() -> None:
    s, entries = waiting()
    html = run_console(run_page(s.s, entries, ALICE), "tok")
    assert "amount_cents = 9000 cents" in html and "Ada Lovelace" not in html
    [approval] = run_page(s.s, entries, AUDREY).approvals
    assert 'customer = "Ada Lovelace" (personal)' in approval.arguments


def test_a_dashboard_decision_signs_the_display_digest(monkeypatch) -> None:
    monkeypatch.setenv("RUNFACTS_APPROVAL_KEYS", KEYS)
    s, _ = waiting()
    [approval] = s.s.approvals.values()
    session = SimpleNamespace(identity=Identity("alice", ("support_agent",)))
    resume = dashboard_app._resume(s.s, session, {"decision": "approve", "approval_id": approval.approvalId})
    assert resume.payload.displayDigest == approval.displayDigest is not None
    assert approval_token_check(parse_keyring(KEYS))(resume, approval) is None
