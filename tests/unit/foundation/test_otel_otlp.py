"""The OTLP exporter, end to end over HTTP: a local receiver decodes what runfacts sends."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import ExportMetricsServiceRequest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from runfacts.otel import OtelSettings, OtelTelemetry


class Receiver(ThreadingHTTPServer):
    """An OTLP/HTTP collector stand-in: keeps (path, content type, body) of every POST."""

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.posts: list[tuple[str, str, bytes]] = []

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"

    def bodies(self, path: str) -> list[bytes]:
        return [body for p, _, body in self.posts if p == path]


class _Handler(BaseHTTPRequestHandler):
    server: Receiver

    def do_POST(self) -> None:  # noqa: N802 - the http.server hook name
        body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
        self.server.posts.append((self.path, self.headers.get("Content-Type", ""), body))
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args: object) -> None:
        """Quiet."""


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    server = Receiver()
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()


def test_spans_and_metrics_reach_the_collector_when_the_exporter_is_otlp(receiver: Receiver) -> None:
    tel = OtelTelemetry(OtelSettings("runfacts-test", exporter="otlp", endpoint=receiver.endpoint,
                                     metric_interval_ms=60_000))
    with tel.span("decider.command", attributes={"runfacts.run_id": "run-7"}):
        tel.add("runfacts.commands", 2, {"command": "CreateRun"})
    tel.shutdown()  # flushes the batch span processor and the metric reader

    assert {ctype for path, ctype, _ in receiver.posts} == {"application/x-protobuf"}
    traces = [ExportTraceServiceRequest.FromString(b) for b in receiver.bodies("/v1/traces")]
    spans = [s for t in traces for r in t.resource_spans for ss in r.scope_spans for s in ss.spans]
    assert [s.name for s in spans] == ["decider.command"]
    assert {a.key: a.value.string_value for a in spans[0].attributes} == {"runfacts.run_id": "run-7"}
    service = {a.key: a.value.string_value for a in traces[0].resource_spans[0].resource.attributes}
    assert service["service.name"] == "runfacts-test"

    metrics = [ExportMetricsServiceRequest.FromString(b) for b in receiver.bodies("/v1/metrics")]
    points = {m.name: [p.as_int for p in m.sum.data_points]
              for req in metrics for r in req.resource_metrics for sm in r.scope_metrics for m in sm.metrics}
    assert points == {"runfacts.commands": [2]}
