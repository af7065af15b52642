"""Unit tests of runfacts.security."""
