"""Telemetry hooks the shells call; no-ops unless an exporter is configured.

Pure code (deciders, reducers) never calls these. The shells (engine, run decider shell,
relay, CLI, dashboard) call `current()` — or a `Telemetry` they were given — at a few points:
a span per command handled / record processed / batch published / view update, and counters,
histograms and gauges. The default `Telemetry` does nothing and answers `enabled = False`, so
a shell can skip even building attributes. `runfacts.otel.OtelTelemetry` implements the
hooks with OpenTelemetry; `configure_from_env()` installs it when RUNFACTS_OTEL_EXPORTER is
`console` or `otlp`.

Trace context crosses Kafka in record headers (W3C `traceparent`/`tracestate`): a span's
`headers()` go on the records it emits, and the consumer's span names them as its parent.
Spans carry runId, commandId/eventId, correlationId and causationId as attributes.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from typing import Any

Headers = Sequence[tuple[str, bytes | None]]
Attributes = Mapping[str, Any]
TRACE_HEADERS = ("traceparent", "tracestate")
ENV_EXPORTER = "RUNFACTS_OTEL_EXPORTER"

# metric names
EVENTS_PROCESSED = "runfacts.events.processed"
COMMANDS_HANDLED = "runfacts.commands.handled"
COMMIT_LATENCY = "runfacts.transaction.commit.latency"
CONSUMER_LAG = "runfacts.consumer.lag"
STUCK_RUNS = "runfacts.runs.stuck"
STUCK_LONGEST = "runfacts.runs.stuck.longest"  # seconds, the longest a run not ended sat in its status
ORPHANED_CALLS = "runfacts.tool.calls.orphaned"  # calls waiting for a claim no dispatcher made in time
RETRIED_ATTEMPTS = "runfacts.tool.calls.retried"  # attempts past the first over the runs followed
CHECKPOINT_LAG = "runfacts.checkpoint.lag"  # seconds, the largest state change past a run's last checkpoint
RETRIES = "runfacts.retries"
POLICY_DENIALS = "runfacts.policy.denials"
OUTBOX_PENDING = "runfacts.outbox.pending"
TOOL_CALLS_IN_FLIGHT = "runfacts.tool.calls.in_flight"  # per dispatcher instance, off the transaction
POLICY_REASONS = frozenset({
    "missing_actor", "untrusted_source", "no_policy_rule", "forbidden_role", "self_approval_forbidden",
    "token_missing", "token_malformed", "token_unknown_key", "token_retired_key", "token_bad_signature",
    "token_expired", "token_claims_mismatch",
    "source_signature_missing", "source_signature_invalid", "source_key_unknown", "source_key_retired",
})


class Span:
    """A span that records nothing (the no-op default; OtelSpan records)."""

    __slots__ = ()

    def __enter__(self) -> Span:
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    def headers(self) -> list[tuple[str, bytes]]:
        """Trace-context headers for records emitted under this span."""
        return []

    def set(self, key: str, value: Any) -> None:
        """Set an attribute."""


NOOP_SPAN = Span()


class Telemetry:
    """The hooks; this base does nothing and costs one call."""

    enabled = False

    def span(self, name: str, parent: Headers | None = None, attributes: Attributes | None = None,
             links: Sequence[Headers] = ()) -> Span:
        """A span named `name`, child of the trace context in `parent` headers (if any)."""
        return NOOP_SPAN

    def add(self, metric: str, amount: int = 1, attributes: Attributes | None = None) -> None:
        """Add to a counter."""

    def record(self, metric: str, value: float, attributes: Attributes | None = None) -> None:
        """Record a histogram value."""

    def gauge(self, metric: str, value: float, attributes: Attributes | None = None) -> None:
        """Set a gauge."""

    def shutdown(self) -> None:
        """Flush and stop exporters."""


_installed: list[Telemetry] = [Telemetry()]


def current() -> Telemetry:
    """The process-wide telemetry (no-op unless installed or configured)."""
    return _installed[0]


def install(telemetry: Telemetry) -> Telemetry:
    """Make `telemetry` the process-wide one; returns the previous one."""
    previous, _installed[0] = _installed[0], telemetry
    return previous


def configure_from_env(service: str, environ: Mapping[str, str] | None = None) -> Telemetry:
    """Install OpenTelemetry when RUNFACTS_OTEL_EXPORTER is console or otlp (none: no-op)."""
    env = os.environ if environ is None else environ
    exporter = env.get(ENV_EXPORTER, "none").strip().lower() or "none"
    if exporter == "none":
        return current()
    from runfacts.otel import OtelSettings, OtelTelemetry

    telemetry = OtelTelemetry(OtelSettings(service=service, exporter=exporter,
                                           endpoint=env.get("OTEL_EXPORTER_OTLP_ENDPOINT")))
    install(telemetry)
    return telemetry


def trace_headers(headers: Headers | None) -> dict[str, str]:
    """The W3C trace-context entries of Kafka headers, as a carrier dict."""
    found: dict[str, str] = {}
    for key, value in headers or ():
        if key in TRACE_HEADERS and value is not None:
            found[key] = value.decode("latin-1") if isinstance(value, bytes) else str(value)
    return found


def with_trace(headers: list[tuple[str, bytes]] | None, span: Span) -> list[tuple[str, bytes]]:
    """`headers` minus any old trace context, plus the span's."""
    extra = span.headers()
    if not extra:
        return list(headers or [])
    return [(k, v) for k, v in headers or [] if k not in TRACE_HEADERS] + extra


def lag_from_stats(stats_json: str) -> list[tuple[str, int, int]]:
    """(topic, partition, consumer_lag) from librdkafka statistics JSON (assigned partitions)."""
    stats = json.loads(stats_json)
    found = []
    for topic, t in (stats.get("topics") or {}).items():
        for part, p in (t.get("partitions") or {}).items():
            lag = p.get("consumer_lag", -1)
            if int(part) >= 0 and lag is not None and lag >= 0:
                found.append((topic, int(part), int(lag)))
    return found
