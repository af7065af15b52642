"""The engine's garbage-collector tuning: freeze what is alive, raise the young threshold."""

from __future__ import annotations

import gc
from collections.abc import Iterator

import pytest

from runfacts.processors.engine.gctune import tune_gc
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
