"""A tool whose required_role no source vouches for is refused naming the roles a person can hold and the fix
(issue 36, the new-user trial: `required_role="facilities"` stopped the decider with no hint which roles exist)."""

from __future__ import annotations

from importlib import resources

import pytest

from runfacts.processors.policy.access import DEFAULT_POLICY, parse_policy
from runfacts.schemas.errors import ConfigError
from runfacts.tools import ToolContext, ToolRegistry


def test_unknown_required_role_names_the_roles_and_the_fix() -> None:
    rooms = ToolRegistry("rooms")

    @rooms.tool("rooms.book", risk="medium", required_role="facilities", approval_when=[("attendees", ">", 10)])
    def book(room: str, attendees: int, ctx: ToolContext) -> dict:
        return {"room": room}

    text = resources.files("runfacts.processors.policy").joinpath(DEFAULT_POLICY).read_text()
    with pytest.raises(ConfigError) as refused:
        parse_policy(text, rooms.catalog(), DEFAULT_POLICY)
    message = str(refused.value)
    assert "rooms.book" in message and "facilities" in message
    # the roles a person can hold (no service role: agent, dispatcher, decider) and both fixes
    assert "(auditor, memory_reviewer, operator, supervisor, support_agent, user: required_role=" in message
    assert "--policy FILE" in message and "dispatcher" not in message
