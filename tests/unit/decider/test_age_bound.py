"""A command's work does not grow with its run's history (issue 24's age curve): past the dedupe
window the state, its JSON and the events a command emits stay the same size, counted
structurally (items and bytes), never timed."""

from __future__ import annotations

from datetime import timedelta

from decider_support import CTX, T0, command, create  # noqa: I001

from runfacts.processors.decider.core import decide_evolve
from runfacts.processors.decider.state import DEDUPE_WINDOW, DIGEST_CHARS, RunState, window_holds
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
    assert len(old.recentCommandDigests) == len(window.recentCommandDigests) == DEDUPE_WINDOW * DIGEST_CHARS
    assert old_events == window_events == 1
    for name, value in window.__dict__.items():  # no collection keeps more items at 4,096 commands
        if isinstance(value, (tuple, list, dict)):
            assert len(getattr(old, name)) == len(value), name
    window_bytes, old_bytes = dump_state(window)[0], dump_state(old)[0]
    assert len(old_bytes) - len(window_bytes) <= 8, (len(window_bytes), len(old_bytes))  # version digits only


def test_window_entry_has_a_fixed_size_when_the_window_fills() -> None:
    """The window keeps digests, not ids: until it is full the state JSON grows by DIGEST_CHARS a
    command, whatever the id's length (the client's ids are 57 characters, the bench's 34)."""
    young, older = (dump_state(_aged(age)[0])[0] for age in (16, 32))  # versions 17 and 33: same digits
    assert len(older) - len(young) == 16 * DIGEST_CHARS
    assert len(_aged(0)[0].recentCommandDigests) == DIGEST_CHARS  # CreateRun's


def test_command_is_seen_when_in_the_last_window_and_forgotten_when_older() -> None:
    state, _ = _aged(DEDUPE_WINDOW + 8)
    assert state.seen(f"age-{DEDUPE_WINDOW + 7:06d}") and state.seen("age-000008")
    assert not state.seen("age-000007") and not state.seen("never-sent")
    assert sum(state.seen(f"age-{i:06d}") for i in range(DEDUPE_WINDOW + 8)) == DEDUPE_WINDOW


def test_window_holds_an_entry_only_at_an_entry_boundary_when_a_digest_spans_two() -> None:
    a, b, c = ("A" * DIGEST_CHARS, "B" * DIGEST_CHARS, "C" * DIGEST_CHARS)
    half = DIGEST_CHARS // 2
    first = b[:half] + a[:half]
    assert window_holds(first + a, a)  # first found across the two entries, then at the second
    assert window_holds(first + a, first) and not window_holds(first + c, a[:half] + c[:half])
    assert not window_holds(first + c, a) and not window_holds("", a)
