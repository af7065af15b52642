"""Unit tests of runfacts.processors.policy."""
