"""The relay's pure decisions: settle a publish attempt, parking, backoff, publish rate."""

from __future__ import annotations

from dataclasses import dataclass

from runfacts.connectors.relay.decisions import Failure, RateWindow, backoff_s, first_rows_to, settle, without_parked


@dataclass(frozen=True)
class R:
    seq: int
    run_id: str
    topic: str = "t"


ROWS = [R(1, "a"), R(2, "b"), R(3, "a"), R(4, "b", "gone"), R(5, "b")]


def test_settle_marks_every_row_when_nothing_failed():
    assert settle(ROWS, []).mark == (1, 2, 3, 4, 5)
    assert not settle(ROWS, []).back_off


def test_settle_parks_first_failing_row_per_run_and_marks_nothing_when_error_is_permanent():
    failures = [Failure(5, "MSG_SIZE_TOO_LARGE: big"), Failure(4, "MSG_SIZE_TOO_LARGE: big")]
    result = settle(ROWS, failures)
    assert result.mark == ()
    assert result.park == ((R(4, "b", "gone"), "MSG_SIZE_TOO_LARGE: big"),)
    assert not result.back_off


def test_settle_backs_off_without_parking_when_error_is_transient():
    result = settle(ROWS, [Failure(2, "_MSG_TIMED_OUT: slow"), Failure(None, "_TRANSPORT")])
    assert (result.mark, result.park, result.back_off) == ((), (), True)


def test_failure_is_transient_when_it_names_no_row():
    assert not Failure(None, "MSG_SIZE_TOO_LARGE: whole transaction").permanent


def test_without_parked_keeps_only_rows_before_parked_seq_when_run_is_parked():
    assert without_parked(ROWS, {"b": 4}) == [R(1, "a"), R(2, "b"), R(3, "a")]


def test_first_rows_to_picks_first_row_per_run_when_topic_missing():
    rows = [R(1, "a", "gone"), R(2, "a", "gone"), R(3, "b")]
    assert first_rows_to(rows, {"gone"}) == {"a": R(1, "a", "gone")}


def test_backoff_doubles_then_caps_when_failures_repeat():
    assert [backoff_s(n, 0.1, 0.5) for n in (1, 2, 3, 4)] == [0.1, 0.2, 0.4, 0.5]
    assert backoff_s(2, 0.1, 1.0, jitter=0.5) == 0.1


def test_rate_window_counts_only_recent_events_when_time_passes():
    window = RateWindow(window_s=10.0)
    window.add(0.0, 100)
    window.add(5.0, 50)
    assert window.rate(5.0) == 15.0
    assert window.rate(12.0) == 5.0
    assert window.total == 150
