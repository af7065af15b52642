"""Unit tests of runfacts.demo."""
