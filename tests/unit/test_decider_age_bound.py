"""A command's work does not grow with its run's history (issue 24's age curve): past the dedupe
window the state, its JSON and the events a command emits stay the same size, counted
structurally (items and bytes), never timed."""

from __future__ import annotations

from datetime import timedelta

from decider_support import CTX, T0, command, create  # noqa: I001

from runfacts.processors.decider.core import decide_evolve
from runfacts.processors.decider.state import DEDUPE_WINDOW, RunState
from runfacts.processors.decider.state_json import dump_state
from runfacts.schemas import commands as cmd


def _aged(age: int) -> tuple[RunState, int]:
    """A run after CreateRun and `age` UpdateProgress; the events of its last command (own
    timestamps: `command`'s shared test clock would move every later test's clock)."""
    _events, state = decide_evolve(create(at=T0), None, CTX)
    emitted = 0
    for i in range(age):
        progress = command(cmd.UpdateProgress, command_id=f"age-{i:06d}",
                           at=T0 + timedelta(milliseconds=i + 1), nextSafeAction=f"step-{i:06d}")
        events, state = decide_evolve(progress, state, CTX)
        emitted = len(events)
    assert state is not None
    return state, emitted


def test_state_and_events_stay_the_same_size_when_run_ages_past_dedupe_window() -> None:
    window, window_events = _aged(DEDUPE_WINDOW + 8)
    old, old_events = _aged(4096)
    assert len(old.recentCommands) == len(window.recentCommands) == DEDUPE_WINDOW
    assert old_events == window_events == 1
    for name, value in window.__dict__.items():  # no collection keeps more items at 4,096 commands
        if isinstance(value, (tuple, list, dict)):
            assert len(getattr(old, name)) == len(value), name
    window_bytes, old_bytes = dump_state(window)[0], dump_state(old)[0]
    assert len(old_bytes) - len(window_bytes) <= 8, (len(window_bytes), len(old_bytes))  # version digits only
