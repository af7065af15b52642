"""The health page's commit-latency charts: inline SVG, escaped, scaled to a round top."""

from __future__ import annotations

from runfacts.dashboard.charts import latency_chart, nice_top
from runfacts.dashboard.console import health_page


def _record(at_ms: int, p50: float, p99: float, app: str = "acme-run-decider") -> dict:
    return {"v": 1, "app": app, "instance": "i1", "atMs": at_ms, "intervalMs": 5000, "commits": 3, "processed": 9,
            "commitLatencyMs": {"p50": p50, "p99": p99, "max": p99}, "batchRecords": {"p50": 2, "p99": 5, "max": 5},
            "lag": [{"topic": "t", "partition": 0, "lag": 4}]}


def test_nice_top_rounds_up_to_one_two_or_five_times_a_power_of_ten():
    assert [nice_top(v) for v in (0.3, 1.0, 1.5, 7.0, 12.0, 101.0)] == [0.5, 1.0, 2.0, 10.0, 20.0, 200.0]


def test_latency_chart_draws_p50_and_p99_lines_with_the_last_values_when_records_were_measured():
    svg = latency_chart("acme-run-decider", [_record(1_000, 3.0, 9.0), _record(6_000, 4.0, 12.0)])
    assert svg.startswith("<svg") and 'data-points="2"' in svg and 'data-p99="12.0"' in svg
    assert svg.count("<polyline") == 2 and "20 ms" in svg  # the y axis' top


def test_latency_chart_escapes_the_application_name_and_skips_unmeasured_intervals():
    unmeasured = {**_record(2_000, 1.0, 1.0), "commitLatencyMs": None}
    svg = latency_chart("<script>x</script>", [_record(1_000, 3.0, 9.0), unmeasured])
    assert "<script>" not in svg and "&lt;script&gt;" in svg and 'data-points="1"' in svg
    assert "no commit measured yet" in latency_chart("idle", [unmeasured])


def test_health_page_shows_a_chart_and_last_numbers_per_processor_when_metrics_are_followed():
    page = health_page([], "", [], 0, [], {"acme-run-decider": [_record(1_000, 3.0, 9.0)]})
    assert 'class="latency-chart"' in page and '<td class="p99">9.0</td>' in page and "<td>4</td>" in page
    assert 'id="no-metrics"' in health_page([], "", [], 0, [], {})
    assert "not followed" in health_page([], "", [], 0, [])


def test_health_page_names_each_halted_partition_and_why_when_the_newest_record_says_so():
    from types import SimpleNamespace

    from runfacts.dashboard.feed import FeedSettings
    from runfacts.dashboard.health import MetricsFeed
    from runfacts.metrics import encode
    from runfacts.settings import KafkaSettings

    feed = MetricsFeed(KafkaSettings(bootstrap_servers="127.0.0.1:1"), FeedSettings("metrics"))
    why = "acme-run-decider partition 2 halted: stored run state record has stateFormat=9 <newer>"
    old = {**_record(1_000, 3.0, 9.0), "halted": [{"partition": 1, "why": "gone since"}]}
    new = {**_record(6_000, 3.0, 9.0), "halted": [{"partition": 2, "why": why}]}
    other = _record(6_000, 1.0, 2.0, app="acme-dispatcher")  # a record of before `halted`: none
    for record in (old, new, other):
        key = f"{record['app']}/i1".encode()
        feed.take(SimpleNamespace(key=lambda k=key: k, value=lambda r=record: encode(r), topic=lambda: "m",
                                  partition=lambda: 0, offset=lambda: 0))
    halted = feed.halted()
    assert [(h["app"], h["partition"]) for h in halted] == [("acme-run-decider", 2)]  # the newest record only

    page = health_page([], "", [], 0, [], feed.by_app(), None, halted, now_ms=18_000)
    assert '<span id="halted-count">1</span>' in page and 'data-partition="2"' in page
    assert "stateFormat=9 &lt;newer&gt;" in page and "<newer>" not in page and "12 s ago" in page
    assert "upgrade the instance" in page
    assert 'id="no-halted"' in health_page([], "", [], 0, [], {}, None, [])
    assert "halted" not in health_page([], "", [], 0, [])  # the metrics topic not followed: nothing claimed
