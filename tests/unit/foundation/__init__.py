"""Unit tests of the runfacts foundation: settings, topics, ids, partitioning, telemetry, otel, logread."""
