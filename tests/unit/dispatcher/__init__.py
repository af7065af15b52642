"""Unit tests of runfacts.processors.dispatcher."""
