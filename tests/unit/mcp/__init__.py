"""Unit tests of runfacts.mcp."""
