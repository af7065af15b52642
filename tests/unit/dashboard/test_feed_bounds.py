"""The dashboard's feeds hold a bounded amount however many runs the topics carry: a compact row
and a position per run, decoded values and fact bytes for a bounded set of recent runs."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from console_support import refund_story
from decider_support import Scenario

from runfacts.dashboard.feed import FactsFeed, FeedSettings, StateFeed
from runfacts.dashboard.runlist import ListQuery, run_list
from runfacts.ops.views import Viewer
from runfacts.settings import KafkaSettings
from runfacts.topics import TopicNames

T0 = datetime(2026, 11, 30, 9, 0, tzinfo=UTC)
KAFKA, NAMES = KafkaSettings(bootstrap_servers="127.0.0.1:1"), TopicNames("bounds")


def test_facts_feed_holds_at_most_cache_runs_and_cache_bytes_when_fed_ten_thousand_runs():
    feed = FactsFeed(KAFKA, FeedSettings(NAMES.events), cache_runs=16, cache_bytes=16 * 5 * 200)
    offset = 0
    for i in range(10_000):
        for _ in range(5):
            feed.add(f"run-{i:05d}", offset, 0, b"x" * 200, partition=i % 3)
            offset += 1

    assert len(feed) == 10_000 and feed.cached() <= 16 and feed.held_bytes <= 16 * 5 * 200
    assert feed.index["run-00000"] == [0, 0, 4, 5]  # where an evicted run's facts lie, to read them back
    assert [o for o, _t, _v in feed.records_of("run-09999")] == list(range(offset - 5, offset))  # the newest is held


def test_facts_feed_evicts_by_bytes_before_the_run_count_is_reached():
    feed = FactsFeed(KAFKA, FeedSettings(NAMES.events), cache_runs=64, cache_bytes=1_000)
    for i in range(20):
        feed.add(f"run-{i}", i, 0, b"y" * 300)
    assert feed.cached() == 3 and feed.held_bytes == 900


def test_state_feed_keeps_a_row_per_run_and_a_bounded_number_of_decoded_states():
    template = Scenario().given(*refund_story("run-template", T0)).s
    feed = StateFeed(KAFKA, FeedSettings(NAMES.state), cache_runs=10)
    for i in range(2_000):
        feed.put(f"run-{i:05d}", template.model_copy(update={"runId": f"run-{i:05d}",
                                                              "updatedAt": T0 + timedelta(seconds=i)}))

    assert len(feed) == 2_000 and len(feed.rows) == 2_000 and feed.cached() == 10
    assert feed.get("run-01999").runId == "run-01999"  # recent: decoded and held
    assert feed.get("run-00000") is None  # evicted and fed without a position: nothing to read back
    listed = run_list(feed.all_rows(), Viewer("olga", ("operator",)), ListQuery(), T0)
    assert listed.total == 2_000 and listed.rows[0].run_id == "run-01999"  # the list needs only rows
    feed.put("run-01999", None)  # archived (tombstone)
    assert len(feed.rows) == 1_999 and feed.get("run-01999") is None
