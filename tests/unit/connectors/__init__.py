"""Unit tests of runfacts.connectors (outbox, relay, debezium, the refund adapter)."""
