"""The meeting-room tool of examples/room_agent.py: book a room; a booking for more than 10 people
waits for a supervisor's approval; the lookup reconciles a lost response (docs/tools.md)."""

from typing import Annotated

from pydantic import BaseModel, Field

from runfacts.tools import LookupContext, ToolContext, ToolError, ToolRegistry

registry = ToolRegistry("rooms")
BOOKINGS: dict[str, dict] = {}  # the room system: one booking per idempotency key


class Booking(BaseModel):
    booking_id: str
    room: str
    attendees: int


@registry.tool("rooms.book", risk="medium", required_role="supervisor", approval_when=[("attendees", ">", 10)])
def book(room: Annotated[str, Field(pattern=r"^room-\d+$")], slot: str,
         attendees: Annotated[int, Field(gt=0, le=200)], ctx: ToolContext) -> Booking:
    if room == "room-0":
        raise ToolError("room_closed", f"{room} is closed")  # declared: nothing was booked
    entry = BOOKINGS.setdefault(ctx.idempotency_key, {"request": ctx.external_request_id, "booking": Booking(
        booking_id=f"bk-{len(BOOKINGS) + 1}", room=room, attendees=attendees)})
    return entry["booking"]


@registry.lookup("rooms.book")
def find_booking(ctx: LookupContext) -> Booking | None:
    return next((e["booking"] for e in BOOKINGS.values() if e["request"] == ctx.external_request_id), None)
