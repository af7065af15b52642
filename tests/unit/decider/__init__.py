"""Unit tests of runfacts.processors.decider."""
