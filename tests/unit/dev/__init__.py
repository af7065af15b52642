"""Unit tests of runfacts.dev (crash harness, payment simulator, dev up)."""
