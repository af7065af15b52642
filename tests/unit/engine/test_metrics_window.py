"""The engines' metrics window: nearest-rank percentiles, null when nothing was measured, a fresh window after
each record."""

from __future__ import annotations

import pytest

from runfacts.metrics import MetricsWindow, decode, encode, percentile


def test_percentile_is_nearest_rank_when_samples_are_uneven():
    samples = [float(x) for x in range(1, 101)]
    assert percentile(samples, 0.5) == 50.0 and percentile(samples, 0.99) == 99.0
    assert percentile([7.0], 0.99) == 7.0


def test_window_record_summarizes_the_interval_then_starts_empty():
    window = MetricsWindow()
    for ms in (4.0, 5.0, 6.0, 40.0):
        window.commit(ms)
    window.batch(10)
    window.batch(30)
    record = window.record("app-a", "i1", 1_000, 5_000, [("t", 0, 3)])
    assert record["commitLatencyMs"] == {"p50": 5.0, "p99": 40.0, "max": 40.0}
    assert record["batchRecords"] == {"p50": 10, "p99": 30, "max": 30}
    assert (record["commits"], record["processed"]) == (4, 40)
    assert record["lag"] == [{"topic": "t", "partition": 0, "lag": 3}]
    empty = window.record("app-a", "i1", 6_000, 5_000, [])
    assert empty["commitLatencyMs"] is None and empty["batchRecords"] is None and empty["commits"] == 0


def test_decode_round_trips_and_refuses_a_record_of_another_version():
    record = MetricsWindow().record("a", "i", 1, 1, [])
    assert decode(encode(record)) == record
    with pytest.raises(ValueError, match="version 1"):
        decode(b'{"v": 2, "app": "a"}')
    with pytest.raises(ValueError, match="instance"):
        decode(b'{"v": 1, "app": "a", "atMs": 1}')
