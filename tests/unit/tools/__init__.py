"""Unit tests of runfacts.tools."""
