"""The decider assembles the payloads it drafts without a second pydantic validation
(`context.payload_of`): every payload it builds must equal, field for field and type for type,
what pydantic builds from the same values, over random command sequences of both tracks."""

from __future__ import annotations

from typing import Any

import pytest
from decider_support import (
    CTX,
    DISPATCHER,
    claim,
    command,
    completed,
    create,
    idempotency_key_of,
    menu_command,
    propose_refund,
    resume,
)
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from runfacts.processors.decider import context
from runfacts.processors.decider.core import decide
from runfacts.processors.decider.evolve import fold
from runfacts.schemas import commands as cmd
from runfacts.schemas import events as ev
from runfacts.schemas.models import payload_class


def _exact(built: Any, checked: Any) -> None:
    assert type(built) is type(checked)
    assert built.__dict__.keys() == checked.__dict__.keys()
    for name, value in checked.__dict__.items():
        mine = built.__dict__[name]
        assert mine == value and type(mine) is type(value), (type(built).__name__, name, mine, value)


@pytest.fixture
def drafted(monkeypatch: pytest.MonkeyPatch) -> list[tuple[Any, Any]]:
    """Every (assembled, validated) payload pair the decider drafts while the test runs."""
    pairs: list[tuple[Any, Any]] = []
    real = context.payload_of

    def checking(event: type[ev.EventBase], values: dict[str, Any]) -> Any:
        built = real(event, values)
        pairs.append((built, payload_class(event)(**values)))
        return built

    monkeypatch.setattr(context, "payload_of", checking)
    return pairs


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                     HealthCheck.too_slow])
@given(st.lists(st.integers(0, 200), min_size=1, max_size=30))
def test_drafted_payloads_equal_validated_ones_when_random_commands_arrive(
        drafted: list[tuple[Any, Any]], steps: list[int]) -> None:
    state = fold(None, decide(create(), None, CTX))
    for i in steps:
        events = decide(menu_command(state, i), state, CTX)
        state = fold(state, events)
    assert drafted, "the decider drafted payloads"
    for built, checked in drafted:
        _exact(built, checked)
    drafted.clear()


def test_payload_with_wrong_types_or_fields_goes_through_validation_when_drafted() -> None:
    # a list for a tuple field becomes the tuple pydantic would make; a wrong type is converted
    # or refused by pydantic, never stored as is
    made = context.payload_of(ev.RunNeedsReview, {"reason": "loop_detected", "attemptedPath": ["a", "b"],
                                                  "detail": "x"})
    assert made.attemptedPath == ("a", "b") and type(made.attemptedPath) is tuple
    with pytest.raises(ValueError, match="reasonCode"):
        context.payload_of(ev.CommandRejected, {"commandId": "c", "commandType": "t", "reasonCode": "Not A Code",
                                                "detail": "", "actualVersion": 0})
    with pytest.raises(ValueError, match="unexpected|extra"):
        context.payload_of(ev.RunResumed, {"nonsense": 1})


def test_random_sequences_draft_both_tracks_fast_and_checked_when_counted(drafted: list[tuple[Any, Any]]) -> None:
    # the property above exercises the assembled path for most event types, not only the fallback
    state = None
    story = [create, propose_refund, resume, lambda: claim(key=idempotency_key_of(state, "tool-call-031")), completed,
             lambda: command(cmd.ReportVerification, DISPATCHER, toolCallId="tool-call-031",
                             status="confirmed_success"),
             lambda: command(cmd.CompleteRun, outcomeRef="s")]
    for step in story:
        state = fold(state, decide(step(), state, CTX))
    for i in range(400):
        if state.terminal:
            state = fold(None, decide(create(run=f"run-{i}"), None, CTX))
        state = fold(state, decide(menu_command(state, (i * 7) % 201), state, CTX))
    kinds = {type(built).__name__ for built, _ in drafted}
    assert {"ToolCallProposedPayload", "ToolCallDispatchingPayload", "ToolCallCompletedPayload",
            "ApprovalGrantedPayload", "RunCompletedPayload", "BudgetDebitedPayload"} <= kinds, kinds
    for built, checked in drafted:
        _exact(built, checked)
