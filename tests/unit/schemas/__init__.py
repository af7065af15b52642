"""Unit tests of runfacts.schemas (the wire contract, spec, codec, registry)."""
