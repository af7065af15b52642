"""Unit tests of runfacts.processors.engine."""
