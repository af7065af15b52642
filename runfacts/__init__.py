"""runfacts: durable, replayable, auditable facts for AI-agent runs, on Kafka."""

__version__ = "0.1.0"
