"""Unit tests of runfacts.dashboard."""
