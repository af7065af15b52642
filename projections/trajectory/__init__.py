"""Eval trajectories: one per run, for evaluation pipelines.

Pure: reducer (evolve a trajectory by one fact), model (the Trajectory records). Shell:
export (`runfacts trajectories export`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from runfacts.doorway import lazy_names

if TYPE_CHECKING:
    from runfacts.projections.trajectory.export import ExportSettings, export
    from runfacts.projections.trajectory.model import Trajectory
    from runfacts.projections.trajectory.reducer import evolve

# the doorway is lazy: importing one module of this room does not load the others
_HOME = {"ExportSettings": "export", "Trajectory": "model", "evolve": "reducer", "export": "export"}
__all__ = ["ExportSettings", "Trajectory", "evolve", "export"]


__getattr__ = lazy_names(__name__, _HOME)
