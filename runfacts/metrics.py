"""The engines' metrics record, pure: what an engine measured in one interval (commit latencies,
batch sizes, the lag it knows), summarized as one JSON record on the metrics topic
(`runfacts.topics.TopicNames.metrics`), written by `processors.engine.runner.MetricsReporter`
and read by the console (`dashboard.health.MetricsFeed`).

The record (`METRICS_VERSION` 1), keyed `<app>/<instance>`:
`{"v": 1, "app", "instance", "atMs", "intervalMs", "commits", "processed",
"commitLatencyMs": {"p50", "p99", "max"} | null, "batchRecords": {"p50", "p99", "max"} | null,
"lag": [{"topic", "partition", "lag"}], "halted": [{"partition", "why"}]}` (`halted`: the partitions
the instance holds halted on a stored record newer than its code, and why; added within version 1,
a record without it has none). Percentiles are nearest-rank over the interval's
samples; an interval without commits has `commitLatencyMs` null (nothing was measured, not 0).
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

METRICS_VERSION = 1


def percentile(samples: Sequence[float], q: float) -> float:
    """The nearest-rank `q`-quantile (0 < q <= 1) of non-empty `samples`."""
    ordered = sorted(samples)
    return ordered[max(0, math.ceil(q * len(ordered)) - 1)]


def summary(samples: Sequence[float]) -> dict[str, float] | None:
    """p50, p99 and max of `samples` (None when there are none)."""
    if not samples:
        return None
    return {"p50": round(percentile(samples, 0.5), 3), "p99": round(percentile(samples, 0.99), 3),
            "max": round(max(samples), 3)}


@dataclass
class MetricsWindow:
    """What one interval measured; `record` summarizes it and starts the next."""

    latencies_ms: list[float] = field(default_factory=list)
    batches: list[int] = field(default_factory=list)
    processed: int = 0

    def commit(self, latency_ms: float) -> None:
        self.latencies_ms.append(latency_ms)

    def batch(self, records: int) -> None:
        self.batches.append(records)
        self.processed += records

    def record(self, app: str, instance: str, at_ms: int, interval_ms: int,
               lag: Sequence[tuple[str, int, int]], halted: Mapping[int, str] | None = None) -> dict[str, Any]:
        """The interval as the metrics record, then an empty window."""
        out = {"v": METRICS_VERSION, "app": app, "instance": instance, "atMs": at_ms, "intervalMs": interval_ms,
               "commits": len(self.latencies_ms), "processed": self.processed,
               "commitLatencyMs": summary(self.latencies_ms), "batchRecords": summary(self.batches),
               "lag": [{"topic": t, "partition": p, "lag": n} for t, p, n in lag],
               "halted": [{"partition": p, "why": why} for p, why in sorted((halted or {}).items())]}
        self.latencies_ms, self.batches, self.processed = [], [], 0
        return out


def encode(record: dict[str, Any]) -> bytes:
    return json.dumps(record, separators=(",", ":"), sort_keys=True).encode()


def decode(value: bytes) -> dict[str, Any]:
    """A metrics record (ValueError naming what is wrong when it is not one this code reads)."""
    record = json.loads(value)
    if not isinstance(record, dict) or record.get("v") != METRICS_VERSION:
        raise ValueError(f"not a metrics record of version {METRICS_VERSION}: {value[:80]!r}")
    for name in ("app", "instance", "atMs"):
        if name not in record:
            raise ValueError(f"metrics record without {name!r}: {value[:80]!r}")
    return record
