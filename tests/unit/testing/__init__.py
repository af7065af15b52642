"""Unit tests of runfacts.testing."""
