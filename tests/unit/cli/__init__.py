"""Unit tests of runfacts.cli (one module per `runfacts <group>`, render)."""
