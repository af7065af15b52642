"""`fold` applies a command's events with one working copy of the state: it must give exactly
what `evolve` one event after the other gives, and leave the state it was given untouched."""

from __future__ import annotations

import copy
from functools import reduce

from decider_support import CTX, create, menu_command
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from runfacts.processors.decider.core import decide
from runfacts.processors.decider.evolve import evolve, fold


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.integers(0, 200), min_size=1, max_size=30))
def test_fold_equals_evolve_event_by_event_and_leaves_its_input_alone_when_random_commands_arrive(
        steps: list[int]) -> None:
    state = fold(None, decide(create(), None, CTX))
    for i in steps:
        events = decide(menu_command(state, i), state, CTX)
        before = copy.deepcopy(state.__dict__)
        folded = fold(state, events)
        stepped = reduce(evolve, events, state)
        assert folded == stepped
        assert state.__dict__ == before, "fold changed the state it was given"
        assert folded is state or len(events) > 0
        state = folded


def test_fold_starts_a_run_and_goes_on_in_one_call_when_given_its_first_events() -> None:
    events = decide(create(), None, CTX)
    assert len(events) >= 2
    assert fold(None, events) == reduce(evolve, events, None)
    assert fold(None, []) is None
