"""Telemetry hooks: no-op by default; with OpenTelemetry (in-memory exporter) the decider shell's
span continues the command's trace and its traceparent rides on every output record."""

from __future__ import annotations

import json

import pytest
from decider_support import CTX, T0, USER, create, propose_refund
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from runfacts import telemetry
from runfacts.otel import OtelSettings, OtelTelemetry
from runfacts.processors.decider.app import DeciderShell
from runfacts.processors.engine.testdriver import TestDriver
from runfacts.schemas import codec
from runfacts.schemas.errors import ConfigError
from runfacts.topics import TopicNames

NAMES = TopicNames("tel")
T0_MS = int(T0.timestamp() * 1000)
PARENT = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"


@pytest.fixture
def otel():
    spans, metrics = InMemorySpanExporter(), InMemoryMetricReader()
    tel = OtelTelemetry(OtelSettings(service="test"), span_exporter=spans, metric_reader=metrics)
    yield tel, spans, metrics
    tel.shutdown()


def _pipe(shell: DeciderShell, *commands, headers=None) -> TestDriver:
    driver = TestDriver(shell.application(), start_ms=T0_MS)
    for c in commands:
        driver.pipe(NAMES.commands, codec.encode(c), c.runId.encode(), headers=headers)
    return driver


def _metric(reader: InMemoryMetricReader, name: str) -> list:
    data = reader.get_metrics_data()
    return [p for rm in data.resource_metrics for sm in rm.scope_metrics for m in sm.metrics
            if m.name == name for p in m.data.data_points]


def test_decider_span_continues_command_trace_when_command_carries_traceparent(otel):
    tel, spans, _ = otel
    driver = _pipe(DeciderShell(NAMES, CTX, telemetry=tel), create(), headers=[("traceparent", PARENT.encode())])

    (span,) = spans.get_finished_spans()
    assert span.name == "run-decider handle run.create"
    assert format(span.context.trace_id, "032x") == PARENT.split("-")[1]
    assert format(span.parent.span_id, "016x") == PARENT.split("-")[2]
    assert span.attributes["runfacts.command_type"] == "run.create"
    outputs = driver.outputs(NAMES.events) + driver.outputs(NAMES.state)
    for record in outputs:
        parent = dict(record.headers)["traceparent"].decode()
        assert parent.split("-")[1:3] == [PARENT.split("-")[1], format(span.context.span_id, "016x")]


def test_policy_denial_is_counted_when_command_has_no_actor(otel):
    tel, _, metrics = otel
    anonymous = create().model_copy(update={"actor": USER.model_copy(update={"subjectId": ""})})

    _pipe(DeciderShell(NAMES, CTX, telemetry=tel), anonymous)

    (denial,) = _metric(metrics, telemetry.POLICY_DENIALS)
    assert denial.value == 1 and denial.attributes["reasonCode"] == "missing_actor"
    handled = _metric(metrics, telemetry.COMMANDS_HANDLED)
    assert [(p.attributes["outcome"], p.value) for p in handled] == [("rejected", 1)]


def test_source_signature_refusal_is_counted_as_a_policy_denial_when_the_command_is_unsigned(otel):
    from runfacts.processors.policy.approvals import Keyring, SigningKey
    from runfacts.processors.policy.sources import SourceKeys

    tel, _, metrics = otel
    keys = SourceKeys({"dashboard": Keyring(keys={"d1": SigningKey(b"d" * 32)}, current="d1")})
    driver = _pipe(DeciderShell(NAMES, CTX, telemetry=tel, sources=keys), create())

    assert len(driver.dead_letters()) == 1
    (denial,) = _metric(metrics, telemetry.POLICY_DENIALS)
    assert denial.value == 1 and denial.attributes["reasonCode"] == "source_signature_missing"


def test_outputs_carry_no_trace_headers_when_telemetry_is_off():
    driver = _pipe(DeciderShell(NAMES, CTX, telemetry=telemetry.Telemetry()), create(), propose_refund())

    for record in driver.outputs(NAMES.events) + driver.outputs(NAMES.state):
        assert "traceparent" not in dict(record.headers or [])
    assert json.loads(driver.outputs(NAMES.state)[-1].value)["status"] == "waiting_for_approval"


def test_lag_from_stats_reads_assigned_partitions_when_given_librdkafka_statistics():
    stats = {"topics": {"t.cmd": {"partitions": {"0": {"consumer_lag": 7}, "1": {"consumer_lag": -1},
                                                 "-1": {"consumer_lag": 0}}}}}

    assert telemetry.lag_from_stats(json.dumps(stats)) == [("t.cmd", 0, 7)]


def test_configure_from_env_names_the_setting_when_exporter_is_unknown():
    previous = telemetry.current()
    with pytest.raises(ConfigError, match="RUNFACTS_OTEL_EXPORTER"):
        telemetry.configure_from_env("svc", {"RUNFACTS_OTEL_EXPORTER": "zipkin"})
    assert telemetry.configure_from_env("svc", {}) is previous
    assert telemetry.current() is previous


def test_with_trace_replaces_old_context_when_span_has_one(otel):
    tel, _, _ = otel
    with tel.span("x") as span:
        merged = telemetry.with_trace([("traceparent", PARENT.encode()), ("eventId", b"e1")], span)

    assert [k for k, _ in merged] == ["eventId", "traceparent"]
    assert dict(merged)["traceparent"] != PARENT.encode()


def test_dispatcher_span_continues_the_event_trace_and_rides_on_its_commands_when_telemetry_is_on(
        otel, tmp_path):
    from ..dispatcher.dispatcher_support import NAMES as LOOP_NAMES
    from ..dispatcher.dispatcher_support import Loop

    tel, spans, _ = otel
    previous = telemetry.install(tel)
    loop = Loop(tmp_path)
    try:
        loop.start_refund(approve=False)
        approval = loop.approval()
        loop.decider.pipe(LOOP_NAMES.commands, codec.encode(approval), approval.runId.encode(),
                          headers=[("traceparent", PARENT.encode())])
        loop.settle()
    finally:
        telemetry.install(previous)
        loop.close()

    finished = {s.name: s for s in spans.get_finished_spans()}
    resume = finished["run-decider handle run.resume"]
    dispatch = finished["dispatcher handle tool.call.authorized"]
    claim = finished["run-decider handle tool.call.claim"]
    trace = PARENT.split("-")[1]
    assert {format(s.context.trace_id, "032x") for s in (resume, dispatch, claim)} == {trace}
    assert dispatch.parent.span_id == resume.context.span_id
    assert claim.parent.span_id == dispatch.context.span_id
    assert dispatch.attributes["runfacts.work"] == "Claim"
    (claim_record,) = [r for r in loop.dispatcher.outputs(LOOP_NAMES.commands)
                       if codec.decode(r.value).commandType == "tool.call.claim"]
    assert dict(claim_record.headers)["traceparent"].decode().split("-")[2] == format(dispatch.context.span_id, "016x")


def test_dispatcher_sends_commands_without_trace_headers_when_telemetry_is_off(tmp_path):
    from ..dispatcher.dispatcher_support import NAMES as LOOP_NAMES
    from ..dispatcher.dispatcher_support import Loop

    loop = Loop(tmp_path)
    try:
        loop.start_refund()
    finally:
        loop.close()

    commands = loop.dispatcher.outputs(LOOP_NAMES.commands)
    assert commands and all("traceparent" not in dict(r.headers or []) for r in commands)
