"""The soak row's judge of flatness (runfacts.dev.crash.rows): steady samples pass; growing
memory, a lag that keeps climbing or state bytes per run that grow are named."""

from __future__ import annotations

from runfacts.dev.crash.rows import _soak_problems, _soak_summary


def _samples(n: int = 30, rss: float = 80.0, rss_growth: float = 0.0, lag_growth: float = 0.0,
             kb_per_run: float = 12.0, kb_growth: float = 0.0) -> list[dict[str, float]]:
    out = []
    for i in range(n):
        runs = 15.0 * (i + 1)
        out.append({"t_s": 15.0 * i, "runs": runs, "decider_rss_mb": rss + rss_growth * i,
                    "decider_state_mb": runs * (kb_per_run + kb_growth * i) / 1024,
                    "lag:p-run-decider": 3 + (i % 4) + lag_growth * i * i})
    return out


def test_steady_samples_are_flat() -> None:
    samples = _samples()
    assert _soak_problems(samples) == []
    assert "decider RSS 80 -> 80 MB, state 12.0 KB/run" in _soak_summary(samples)


def test_memory_that_keeps_growing_is_named() -> None:
    problems = _soak_problems(_samples(rss_growth=4.0))
    assert any(p.startswith("decider_rss_mb grew") for p in problems), problems


def test_a_lag_that_keeps_climbing_is_named() -> None:
    problems = _soak_problems(_samples(lag_growth=1.0))
    assert any(p.startswith("lag:p-run-decider grew") for p in problems), problems


def test_state_bytes_per_run_that_grow_are_named() -> None:
    problems = _soak_problems(_samples(kb_growth=1.0))
    assert any(p.startswith("decider_state_mb per run grew") for p in problems), problems


def test_too_short_a_soak_is_refused_rather_than_passed() -> None:
    assert _soak_problems(_samples(n=4)) == ["only 4 samples: the soak was too short to judge flatness"]
