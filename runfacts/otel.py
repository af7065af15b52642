"""The telemetry hooks on OpenTelemetry (optional extra `otel`): spans, counters, histograms, gauges.

Exporters by configuration: `console` (stdout), `otlp` (OTLP over HTTP, needs
opentelemetry-exporter-otlp-proto-http; endpoint from OTEL_EXPORTER_OTLP_ENDPOINT), or, in
tests, any span exporter and metric reader passed in (e.g. the SDK's in-memory ones).
The providers are this object's own, never the global ones, so tests do not leak into each
other. Trace context is read from and written to Kafka headers with the W3C propagator.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from opentelemetry import trace
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import (
    ConsoleMetricExporter,
    MetricReader,
    PeriodicExportingMetricReader,
)
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import (
    BatchSpanProcessor,
    ConsoleSpanExporter,
    SimpleSpanProcessor,
    SpanExporter,
)
from opentelemetry.trace import Link, Status, StatusCode
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from runfacts.schemas.errors import ConfigError
from runfacts.telemetry import Attributes, Headers, Span, Telemetry, trace_headers

_PROPAGATOR = TraceContextTextMapPropagator()


@dataclass(frozen=True)
class OtelSettings:
    """Service name and where telemetry goes (console, otlp)."""

    service: str
    exporter: str = "console"
    endpoint: str | None = None
    metric_interval_ms: int = 10_000


class OtelSpan(Span):
    """An OpenTelemetry span used as a context manager; ends on exit, records errors."""

    __slots__ = ("span",)

    def __init__(self, span: Any) -> None:
        self.span = span

    def __enter__(self) -> OtelSpan:
        return self

    def __exit__(self, *info: object) -> None:
        exc = info[1] if len(info) > 1 else None
        if isinstance(exc, BaseException):
            self.span.record_exception(exc)
            self.span.set_status(Status(StatusCode.ERROR, f"{type(exc).__name__}: {exc}"))
        self.span.end()

    def headers(self) -> list[tuple[str, bytes]]:
        carrier: dict[str, str] = {}
        _PROPAGATOR.inject(carrier, context=trace.set_span_in_context(self.span))
        return [(k, v.encode("latin-1")) for k, v in carrier.items()]

    def set(self, key: str, value: Any) -> None:
        self.span.set_attribute(key, value)


class OtelTelemetry(Telemetry):
    """Telemetry on OpenTelemetry SDK providers owned by this object."""

    enabled = True

    def __init__(self, settings: OtelSettings, span_exporter: SpanExporter | None = None,
                 metric_reader: MetricReader | None = None) -> None:
        resource = Resource.create({"service.name": settings.service})
        self.tracer_provider = TracerProvider(resource=resource)
        if span_exporter is not None:
            self.tracer_provider.add_span_processor(SimpleSpanProcessor(span_exporter))
        elif settings.exporter != "none":  # none: the caller adds its own span processor
            self.tracer_provider.add_span_processor(BatchSpanProcessor(_span_exporter(settings)))
        reader = metric_reader or PeriodicExportingMetricReader(
            _metric_exporter(settings), export_interval_millis=settings.metric_interval_ms)
        self.meter_provider = MeterProvider(resource=resource, metric_readers=[reader])
        self.tracer = self.tracer_provider.get_tracer("runfacts")
        self.meter = self.meter_provider.get_meter("runfacts")
        self._instruments: dict[tuple[str, str], Any] = {}

    def span(self, name: str, parent: Headers | None = None, attributes: Attributes | None = None,
             links: Sequence[Headers] = ()) -> OtelSpan:
        carrier = trace_headers(parent)
        context = _PROPAGATOR.extract(carrier) if carrier else None
        span_links = [Link(c) for c in (_span_context(h) for h in links) if c is not None]
        span = self.tracer.start_span(name, context=context, attributes=dict(attributes or {}), links=span_links)
        return OtelSpan(span)

    def add(self, metric: str, amount: int = 1, attributes: Attributes | None = None) -> None:
        self._instrument("counter", metric).add(amount, dict(attributes or {}))

    def record(self, metric: str, value: float, attributes: Attributes | None = None) -> None:
        self._instrument("histogram", metric).record(value, dict(attributes or {}))

    def gauge(self, metric: str, value: float, attributes: Attributes | None = None) -> None:
        self._instrument("gauge", metric).set(value, dict(attributes or {}))

    def _instrument(self, kind: str, name: str) -> Any:
        found = self._instruments.get((kind, name))
        if found is None:
            make: Any = {"counter": self.meter.create_counter, "histogram": self.meter.create_histogram,
                    "gauge": self.meter.create_gauge}[kind]
            found = self._instruments[(kind, name)] = make(name)
        return found

    def shutdown(self) -> None:
        self.tracer_provider.shutdown()
        self.meter_provider.shutdown()


def _span_context(headers: Headers) -> Any:
    carrier = trace_headers(headers)
    if not carrier:
        return None
    ctx = trace.get_current_span(_PROPAGATOR.extract(carrier)).get_span_context()
    return ctx if ctx.is_valid else None


def _span_exporter(settings: OtelSettings) -> SpanExporter:
    if settings.exporter == "console":
        return ConsoleSpanExporter()
    if settings.exporter == "otlp":
        try:
            from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
        except ImportError:
            raise ConfigError("RUNFACTS_OTEL_EXPORTER", "otlp",
                              "install opentelemetry-exporter-otlp-proto-http (runfacts[otlp])") from None
        return OTLPSpanExporter(endpoint=_endpoint(settings, "traces"))
    raise ConfigError("RUNFACTS_OTEL_EXPORTER", settings.exporter, "must be none, console or otlp")


def _metric_exporter(settings: OtelSettings) -> Any:
    if settings.exporter == "otlp":
        from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter

        return OTLPMetricExporter(endpoint=_endpoint(settings, "metrics"))
    return ConsoleMetricExporter()


def _endpoint(settings: OtelSettings, signal: str) -> str | None:
    return f"{settings.endpoint.rstrip('/')}/v1/{signal}" if settings.endpoint else None
