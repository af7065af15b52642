"""Unit tests of benchmarks/ (their bars and command lines)."""
