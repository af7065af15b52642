"""The meeting-room agent: a run per booking, re-entered by replay after any crash.

    cd examples
    runfacts dev up --tools room_tools:registry --agent room_agent:book_room   # the stack and this agent
    source .runfacts/dev/runfacts/env.sh                                       # in another shell
    python room_agent.py room-12 2026-12-07T10 14                              # submit a booking
    runfacts approvals list && runfacts approve APPROVAL_ID                    # over 10 people: as the dev user
"""

import sys

from room_tools import book

from runfacts.client import ApprovalRejected, Run, Runfacts


def book_room(run: Run) -> None:  # deterministic: decides from run.goal and recorded answers only
    _, room, slot, attendees = run.goal.split(":")  # "booking:room-12:2026-12-07T10:14"
    run.reason(f"book {room} at {slot} for {attendees}", evidence=[run.goal])
    call = run.propose(book, {"room": room, "slot": slot, "attendees": int(attendees)}, target=room)
    try:
        booking = call.result(timeout=3600)  # a Booking; a supervisor approves above 10 people first
    except ApprovalRejected:
        run.fail("booking_rejected")
        return
    run.complete(outcome=f"booking:{booking.booking_id}")


if __name__ == "__main__":
    room, slot, attendees = sys.argv[1:4]
    booker = Runfacts.connect().agent("book_room")(book_room)  # the name `runfacts worker agent` serves it under
    print(booker.submit(goal=f"booking:{room}:{slot}:{attendees}", summary=f"Book {room} at {slot}",
                        user_id="employee-7").id)
