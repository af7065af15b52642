"""Decider shell cost with and without tracing, on the broker-free test driver.

    .venv/bin/python benchmarks/telemetry_bench.py [--runs 300]

Each run is create + propose (approval) + resume = 3 commands, piped one transaction each.
Modes: `off` (the default no-op telemetry), `otel` (OpenTelemetry SDK, spans and metrics
recorded, batch span processor with an exporter that drops them: the SDK's own cost).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from decider_support import CTX, T0, create, propose_refund, resume  # noqa: E402
from opentelemetry.sdk.metrics.export import InMemoryMetricReader  # noqa: E402
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult  # noqa: E402

from runfacts import telemetry  # noqa: E402
from runfacts.otel import OtelSettings, OtelTelemetry  # noqa: E402
from runfacts.processors.decider.app import DeciderShell  # noqa: E402
from runfacts.processors.engine.testdriver import TestDriver  # noqa: E402
from runfacts.schemas import codec  # noqa: E402
from runfacts.topics import TopicNames  # noqa: E402

NAMES = TopicNames("bench")
PARENT = b"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"


class DropExporter(SpanExporter):
    def export(self, spans):  # type: ignore[no-untyped-def]
        return SpanExportResult.SUCCESS


def _records(runs: int) -> list[tuple[bytes, bytes]]:
    out = []
    for i in range(runs):
        run = f"run-bench-{i}"
        for c in (create(run=run, at=T0), propose_refund(run=run, at=T0), resume(run=run, at=T0)):
            out.append((c.runId.encode(), codec.encode(c)))
    return out


def _once(tel: telemetry.Telemetry, records: list[tuple[bytes, bytes]]) -> float:
    driver = TestDriver(DeciderShell(NAMES, CTX, telemetry=tel).application(), start_ms=int(T0.timestamp() * 1000))
    headers = [("traceparent", PARENT)] if tel.enabled else None
    start = time.perf_counter()
    for key, value in records:
        driver.pipe(NAMES.commands, value, key, headers=headers)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=300)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    records = _records(args.runs)
    otel = OtelTelemetry(OtelSettings(service="bench", exporter="none"), metric_reader=InMemoryMetricReader())
    otel.tracer_provider.add_span_processor(_batch(DropExporter()))
    modes = {"off": telemetry.Telemetry(), "otel": otel}
    times: dict[str, list[float]] = {name: [] for name in modes}
    for _ in range(args.repeat):  # interleaved, so machine noise hits both modes alike
        for name, tel in modes.items():
            times[name].append(_once(tel, records))
    for name, samples in times.items():
        best = min(samples)
        print(f"{name:5s} {len(records)} commands: best {best * 1000:.0f} ms, "
              f"{len(records) / best:,.0f} commands/s, {best / len(records) * 1e6:.0f} us/command "
              f"(median {statistics.median(samples) * 1000:.0f} ms)")
    otel.shutdown()


def _batch(exporter: SpanExporter):  # type: ignore[no-untyped-def]
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    return BatchSpanProcessor(exporter)


if __name__ == "__main__":
    main()
