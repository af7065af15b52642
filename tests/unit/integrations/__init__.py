"""Unit tests of runfacts.integrations."""
