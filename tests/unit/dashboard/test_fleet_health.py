"""Issue 35.5: health per run and fleet-wide (stuck time, retries, orphans, checkpoint lag, policy
denials by reason), as the console's health page and OpenTelemetry gauges read them.

No broker: the feeds are fed the records the run decider writes (state records, events with
their type header), as their consumers would hand them over."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from decider_support import AGENT, Scenario, command, create, policy_ctx, propose_lookup, propose_refund

from runfacts import telemetry
from runfacts.dashboard.console import health_page, span_words
from runfacts.dashboard.feed import FactsFeed, FeedSettings, StateFeed
from runfacts.dashboard.runlist import fleet_health, row_of
from runfacts.ops.views import Viewer
from runfacts.schemas import commands as cmd
from runfacts.schemas.codec import Codec
from runfacts.settings import KafkaSettings

KAFKA = KafkaSettings(bootstrap_servers="127.0.0.1:1")  # never reached
OLGA = Viewer("olga", ("operator",))


class Recording(telemetry.Telemetry):
    enabled = True

    def __init__(self) -> None:
        self.gauged: dict[str, float] = {}

    def gauge(self, metric: str, value: float, attributes: Any = None) -> None:
        self.gauged[metric] = value


def _orphan() -> Any:
    return Scenario().given(create(), propose_lookup()).s  # authorized, never claimed


def test_state_feed_gauges_orphans_retries_stuck_and_checkpoint_lag_fleet_wide():
    feed = StateFeed(KAFKA, FeedSettings("t"))
    state = _orphan()
    feed.put(state.runId, state)
    tel = Recording()
    since = state.toolCalls["tool-call-010"].claimableSince
    assert since is not None

    feed.gauges(tel, since + timedelta(minutes=20))

    assert tel.gauged[telemetry.ORPHANED_CALLS] == 1
    assert tel.gauged[telemetry.STUCK_RUNS] == 1 and tel.gauged[telemetry.STUCK_LONGEST] >= 20 * 60
    assert tel.gauged[telemetry.RETRIED_ATTEMPTS] == 0
    assert tel.gauged[telemetry.CHECKPOINT_LAG] == (state.updatedAt - state.createdAt).total_seconds()


def test_facts_feed_counts_policy_denials_by_reason_and_facts_past_the_checkpoint():
    s = Scenario(policy_ctx()).given(create(), propose_refund())
    denied = s.when(command(cmd.ResumeRun, AGENT, approvalId="approval-tool-call-031", decision="approve",
                            argsHash=s.s.approvals["approval-tool-call-031"].argsHash)).last
    rejected = next(e for e in denied if e.eventType == "command.rejected")
    assert rejected.payload.reasonCode in telemetry.POLICY_REASONS  # type: ignore[attr-defined]
    feed, codec = FactsFeed(KAFKA, FeedSettings("events")), Codec()
    facts = [*s.log, *([] if rejected in s.log else [rejected])]
    for event in facts:
        feed.count(event.runId, event.eventType, codec.encode(event))

    since, denials = feed.health_counts()

    assert since[s.s.runId] == len(facts)  # no checkpoint yet: every fact
    assert denials == {s.s.runId: {rejected.payload.reasonCode: 1}}  # type: ignore[attr-defined]
    feed.count(s.s.runId, "checkpoint.saved", b"")
    assert feed.health_counts()[0][s.s.runId] == 0


def test_health_page_lists_the_run_that_needs_a_look_with_its_figures():
    state = _orphan()
    now = (state.toolCalls["tool-call-010"].claimableSince or state.createdAt) + timedelta(minutes=5)
    fleet = fleet_health([row_of(state)], OLGA, now, timedelta(minutes=10), {state.runId: 7},
                         {state.runId: {"forbidden_role": 2}})

    page = health_page([], "", [], 0, [], None, fleet)

    assert fleet.orphans == 1 and fleet.denials == {"forbidden_role": 2} and fleet.checkpoint_facts_max == 7
    assert f'<tr data-run="{state.runId}">' in page and "forbidden role 2" in page
    assert '<td class="orphans">1</td>' in page and "7 facts" in page


def test_durations_read_in_their_two_largest_units():
    assert span_words(43196 * 60 + 12) == "29 d 23 h"
    assert span_words(3 * 3600 + 300) == "3 h 05 min" and span_words(899) == "14 min 59 s" and span_words(5) == "5 s"
