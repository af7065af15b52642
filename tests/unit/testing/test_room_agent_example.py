"""examples/room_agent.py (issue 36's new-user trial, become an example) on `runfacts.testing`, in
process: a small booking runs at once, a big one waits for a supervisor (approved: booked once;
rejected: the run fails, nothing booked), a closed room fails typed, and a handler that dies after
the booking is re-entered by replay: one booking, no rejected command.
(tests/integration/test_room_agent_dev_up.py runs the same agent under `runfacts dev up --agent`.)"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "examples"))

import room_agent  # noqa: E402
import room_tools  # noqa: E402

from runfacts.client import ToolFailed  # noqa: E402
from runfacts.testing import TestStack  # noqa: E402


@pytest.fixture
def stack():
    with TestStack(room_tools.registry) as made:
        yield made


def booking(stack: TestStack, run_id: str, goal: str) -> str:
    agent = stack.client().agent("book_room")(room_agent.book_room)
    agent.submit(goal=goal, summary="Book a room", user_id="employee-7", run_id=run_id)
    agent.recover()
    return stack.states()[run_id].status


def test_a_small_booking_needs_no_approval(stack: TestStack) -> None:
    assert booking(stack, "b-1", "booking:room-12:2026-12-07T10:4") == "completed"
    [ran] = stack.executions("rooms.book")
    assert "approval.required" not in stack.event_types("b-1") and "run.completed" in stack.event_types("b-1")


@pytest.mark.parametrize(("decision", "status", "booked"), [("approve", "completed", 1), ("reject", "failed", 0)])
def test_a_big_booking_waits_for_a_supervisor(stack: TestStack, decision: str, status: str, booked: int) -> None:
    rf = stack.client()
    asked: list[str] = []
    stack.on_approval(lambda approval: (asked.append(approval.required_role),
                                        rf.decide(approval, decision, approver="sam")))
    assert booking(stack, "b-2", "booking:room-40:2026-12-07T14:25") == status
    assert asked == ["supervisor"] and len(stack.executions("rooms.book")) == booked


def test_a_closed_room_fails_typed(stack: TestStack) -> None:
    with pytest.raises(ToolFailed, match="room_closed"):
        booking(stack, "b-3", "booking:room-0:2026-12-07T09:2")


def test_a_crash_after_the_booking_is_recovered_by_replay(stack: TestStack, monkeypatch: pytest.MonkeyPatch) -> None:
    died: list[str] = []
    real_complete = room_agent.Run.complete

    def complete_once(run, *args, **kwargs):  # the process dies after the booking, before completing
        if not died:
            died.append(run.id)
            raise SystemExit("killed")
        return real_complete(run, *args, **kwargs)

    monkeypatch.setattr(room_agent.Run, "complete", complete_once)
    with pytest.raises(SystemExit):
        booking(stack, "b-4", "booking:room-7:2026-12-07T11:3")
    assert "tool.call.completed" in stack.event_types("b-4") and stack.states()["b-4"].status != "completed"
    agent = stack.client().agent("book_room")(room_agent.book_room)
    assert agent.recover() == ["b-4"] and stack.states()["b-4"].status == "completed"
    assert len(stack.executions("rooms.book")) == 1 and "command.rejected" not in stack.event_types("b-4")
