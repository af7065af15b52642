"""The decider's parsed-state cache is bounded by the stored bytes its states came from, not
only by count: runs with large states take more room, and an evicted run's timer memo goes
with it (a memo must not keep an evicted state alive)."""

from __future__ import annotations

from decider_support import Scenario, create

from runfacts.processors.decider.app import Cached, StateCache


def _entry(size: int) -> Cached:
    return Cached(b"x" * size, Scenario().given(create()).s, {})


def test_oldest_states_leave_once_their_stored_bytes_pass_the_bound_when_states_grow() -> None:
    cache = StateCache(max_bytes=10_000, max_entries=100)
    for i in range(5):
        assert cache.put(f"run-{i}".encode(), _entry(2_000)) == []
    assert cache.bytes == 10_000 and len(cache) == 5
    assert cache.put(b"run-big", _entry(5_000)) == [b"run-0", b"run-1", b"run-2"]
    assert cache.bytes == 9_000 and cache.get(b"run-0") is None and cache.get(b"run-big") is not None


def test_a_run_put_again_replaces_its_entry_and_its_bytes_when_its_state_changes() -> None:
    cache = StateCache(max_bytes=10_000, max_entries=100)
    cache.put(b"run-1", _entry(4_000))
    cache.put(b"run-1", _entry(1_000))
    assert (len(cache), cache.bytes) == (1, 1_000)


def test_the_count_bound_holds_for_small_states_when_many_runs_pass() -> None:
    cache = StateCache(max_bytes=1 << 30, max_entries=3)
    evicted = [k for i in range(5) for k in cache.put(f"run-{i}".encode(), _entry(10))]
    assert evicted == [b"run-0", b"run-1"] and len(cache) == 3
