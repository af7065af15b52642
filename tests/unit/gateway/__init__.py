"""Unit tests of runfacts.gateway."""
