"""The client says why a call waits when its capability is paused: a result wait that times out
names the pause ("waiting: CAP paused by WHO: WHY") until the call is claimed."""

from __future__ import annotations

from datetime import UTC, datetime

from decider_support import DISPATCHER, Scenario, claim, command, create, propose_lookup

from runfacts.client.errors import WaitTimeout
from runfacts.client.outcomes import Entry, held
from runfacts.processors.policy.retry import args_hash, idempotency_key
from runfacts.schemas import commands as cmd

RUN = "run-held-client"


def test_a_held_call_says_who_paused_its_capability_until_it_is_claimed() -> None:
    hold = command(cmd.ReportToolHeld, DISPATCHER, run=RUN, toolCallId="call-1", pauseId="evt-pause-1",
                   pausedBy="olga", reason="provider incident", pausedAt=datetime(2026, 12, 6, tzinfo=UTC))
    s = Scenario().given(create(run=RUN), propose_lookup("call-1", run=RUN), hold)
    entries = [Entry(i, e) for i, e in enumerate(s.log)]
    assert "tool.call.held" in [e.event_type for e in entries]
    why = held(entries, "call-1")
    assert why == "waiting: orders.lookup paused by olga: provider incident"
    assert "waiting: orders.lookup paused by olga" in str(WaitTimeout(RUN, "result", 5.0, "call-1", why))
    key = idempotency_key(RUN, "lookup", "order-001", args_hash({"orderId": "order-001"}))
    s.given(claim("call-1", key=key, run=RUN))  # resumed: claimed, no longer waiting on the pause
    assert held([Entry(i, e) for i, e in enumerate(s.log)], "call-1") is None
    assert "are the decider and dispatcher running?" in str(WaitTimeout(RUN, "result", 5.0, "call-1"))
