"""Unit tests of runfacts.client (and its agents)."""
