"""Unit tests of runfacts.privacy."""
