"""The jobs that run every projection: the live projector and the replay.

Shells: app (ProjectorShell, the engine application behind `runfacts worker projector`; its
factory is runfacts.workers:projector), memory (MemoryProjectorShell, `runfacts worker memory`:
the compacted memory topic; factory runfacts.workers:memory_projector), replay (`runfacts
replay`: rebuild a projection from the events log into a fresh topic or a directory).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from runfacts.doorway import lazy_names

if TYPE_CHECKING:
    from runfacts.projections.projector.app import ProjectorShell, app_name
    from runfacts.projections.projector.memory import MemoryProjectorShell
    from runfacts.projections.projector.replay import ReplayReport, ReplaySettings

# the doorway is lazy: importing one module of this room does not load the others
_HOME = {"MemoryProjectorShell": "memory", "ProjectorShell": "app", "ReplayReport": "replay",
         "ReplaySettings": "replay", "app_name": "app"}
__all__ = ["MemoryProjectorShell", "ProjectorShell", "ReplayReport", "ReplaySettings", "app_name"]


__getattr__ = lazy_names(__name__, _HOME)
