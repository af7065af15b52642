"""runfacts: durable, replayable, auditable facts for AI-agent runs, on Kafka.

The foundation (imports only runfacts.schemas): settings (KafkaSettings, RUNFACTS_KAFKA_*),
topics (names, specs, group naming), partitioning, crashpoints, telemetry (hooks), otel
(optional plug-in), logread (the one topic reader). Above processors, projections and
connectors: workers (the composition roots), ops/, security/, dashboard/, demo/, dev/
(fenced: nothing shipped imports it) and cli/ (one module per `runfacts <group>`).
"""

from __future__ import annotations

from runfacts.doorway import lazy_modules

__version__ = "0.1.0"

# the rooms, imported on first use
__all__ = [
    "cli",
    "crashpoints",
    "dashboard",
    "demo",
    "dev",
    "logread",
    "ops",
    "otel",
    "partitioning",
    "security",
    "settings",
    "telemetry",
    "topics",
    "workers",
]


__getattr__ = lazy_modules(__name__, __all__)
