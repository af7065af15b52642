"""Unit tests of runfacts.projections (user view, audit, trajectory, the projectors)."""
