"""One trace spans command -> event -> view update, through the real broker and the real decider."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest
from engine_support import EngineThread, read_all, settings, wait_for
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from ops_support import Deployment, waiting_run

from runfacts import telemetry
from runfacts.dashboard.feed import FeedSettings, ViewFeed, decode_view
from runfacts.ops.client import CommandClient
from runfacts.ops.control import Issue, resume_command
from runfacts.otel import OtelSettings, OtelTelemetry
from runfacts.security.identity import Identity

pytestmark = pytest.mark.integration


@pytest.fixture
def otel():
    spans, metrics = InMemorySpanExporter(), InMemoryMetricReader()
    tel = OtelTelemetry(OtelSettings(service="trace-test"), span_exporter=spans, metric_reader=metrics)
    previous = telemetry.install(tel)
    yield spans, metrics
    telemetry.install(previous)
    tel.shutdown()


def _hex(n: int, width: int) -> str:
    return format(n, f"0{width}x")


def test_one_trace_spans_command_event_and_view_update_when_telemetry_is_on(
        kafka_bootstrap: str, tmp_path: Path, otel) -> None:
    spans, metrics = otel
    unique = uuid.uuid4().hex[:10]
    dep = Deployment.create(kafka_bootstrap, f"trace{unique}")
    run = f"run-{unique}"
    engine = EngineThread(dep.decider(), settings(kafka_bootstrap, tmp_path / "state", f"tr-{unique}")).start()
    feed = ViewFeed(dep.kafka, FeedSettings(dep.names.user_view, decode_view)).start()
    try:
        dep.send(*waiting_run(run, f"call-{unique}"))
        state = dep.wait_state(run, lambda s: s.status == "waiting_for_approval")
        alice = Identity("alice", ("support_agent",)).actor("cli")
        command = resume_command(state, f"approval-call-{unique}", "approve", Issue(alice, f"cmd-{unique}",
                                                                                     state.updatedAt))
        client = CommandClient(dep.kafka, dep.names)
        with telemetry.current().span("cli send run.resume") as root:
            outcome = client.send(command, root.headers())
        client.close()
        assert outcome.accepted
        wait_for(lambda: any(s.name == "dashboard view update" and s.attributes.get("runfacts.version") ==
                             state.version + 3 for s in spans.get_finished_spans()), 30, "view update span")
    finally:
        feed.stop()
        engine.stop()

    finished = spans.get_finished_spans()
    cli = next(s for s in finished if s.name == "cli send run.resume")
    decider = next(s for s in finished if s.name == "run-decider handle run.resume")
    view = next(s for s in finished if s.name == "dashboard view update"
                and s.attributes.get("runfacts.version") == state.version + 3)
    assert cli.context.trace_id == decider.context.trace_id == view.context.trace_id
    assert decider.parent.span_id == cli.context.span_id
    assert view.parent.span_id == decider.context.span_id
    assert decider.attributes["runfacts.command_id"] == command.commandId
    events = [m for m in read_all(kafka_bootstrap, dep.names.events) if m.key() == run.encode()]
    traced = [dict(m.headers())["traceparent"].decode() for m in events if "traceparent" in dict(m.headers())]
    expected = f"00-{_hex(cli.context.trace_id, 32)}-{_hex(decider.context.span_id, 16)}-"
    assert sum(t.startswith(expected) for t in traced) == len(outcome.events)
    processed = [m for rm in metrics.get_metrics_data().resource_metrics for sm in rm.scope_metrics
           for m in sm.metrics if m.name == telemetry.EVENTS_PROCESSED]
    assert processed, "the engine counted processed records"
