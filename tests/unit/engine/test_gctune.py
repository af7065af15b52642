"""The engine's garbage-collector tuning (freeze what is alive, raise the young threshold) and its
allocator tuning (give freed heap pages back to the OS, bound the malloc arenas)."""

from __future__ import annotations

import gc
import platform
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from runfacts.processors.engine.gctune import HeapTrimmer, limit_arenas, trim_heap, tune_gc
from runfacts.processors.engine.settings import EngineSettings


@pytest.fixture
def gc_state() -> Iterator[None]:
    before = gc.get_threshold()
    yield
    gc.unfreeze()
    gc.set_threshold(*before)


def test_live_objects_are_frozen_and_the_young_threshold_raised_when_tuned(gc_state) -> None:
    gc.set_threshold(700, 10, 10)
    alive = [[i] for i in range(1000)]
    tune_gc(50_000)
    assert gc.get_freeze_count() >= len(alive)
    assert gc.get_threshold() == (50_000, 10, 10)


def test_the_interpreters_settings_stay_when_the_threshold_is_zero(gc_state) -> None:
    gc.unfreeze()
    gc.set_threshold(700, 10, 10)
    tune_gc(0)
    assert gc.get_threshold() == (700, 10, 10)
    assert gc.get_freeze_count() == 0


def test_the_engine_tunes_by_default_and_the_setting_is_read_from_the_environment(
        monkeypatch) -> None:
    assert EngineSettings().gc_threshold == 50_000
    monkeypatch.setenv("RUNFACTS_GC_THRESHOLD", "0")
    assert EngineSettings().gc_threshold == 0


def _rss_kb() -> int:
    return int(next(line for line in Path("/proc/self/status").read_text().splitlines()
                    if line.startswith("VmRSS")).split()[1])


GLIBC = platform.libc_ver()[0] == "glibc"


def test_freed_heap_pages_go_back_to_the_os_when_the_heap_is_trimmed() -> None:
    assert not limit_arenas(0)  # 0: nothing changes
    if not GLIBC:  # malloc_trim and mallopt are glibc's: elsewhere both do nothing
        assert not trim_heap()
        return
    gc.collect()
    blocks = [bytes(1_000) for _ in range(100_000)]  # ~100 MB of malloc'ed blocks in the heap
    keep = blocks[::1000]  # a few survivors pin the heap's top: free() alone cannot shrink it
    del blocks
    before = _rss_kb()
    assert trim_heap()
    assert _rss_kb() < before - 50_000, "malloc_trim gave back less than half of ~100 MB freed"
    assert keep


def test_the_trimmer_trims_on_its_interval_and_stops_when_asked() -> None:
    trimmer = HeapTrimmer(0.02)
    time.sleep(0.3)
    trimmer.stop()
    done = trimmer.trims
    time.sleep(0.1)
    assert trimmer.trims == done and done >= (3 if GLIBC else 0)
    assert not any(t.name == "runfacts-heap-trim" and t.is_alive() for t in threading.enumerate())
    assert HeapTrimmer(0).trims == 0


def test_the_allocator_settings_default_to_one_trim_each_ten_seconds_and_glibcs_arenas(monkeypatch) -> None:
    assert (EngineSettings().heap_trim_interval_ms, EngineSettings().malloc_arena_max) == (10_000, 0)
    monkeypatch.setenv("RUNFACTS_MALLOC_ARENA_MAX", "2")
    assert EngineSettings().malloc_arena_max == 2
