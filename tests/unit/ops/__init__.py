"""Unit tests of runfacts.ops."""
