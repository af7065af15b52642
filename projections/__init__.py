"""runfacts.projections: read models folded from the events log.

Pure: facts (what a reducer receives), records (projection wire schemas), user_view, memory
(the memory view: confirmed, unexpired, unrevoked entries per scope).
Shells: eventlog (bytes -> Fact, live and replay), sinks (topic and directory sinks).
Rooms: audit/, trajectory/, projector/ (the live projector and the replay job).
"""

from __future__ import annotations

from runfacts.doorway import lazy_modules

# the rooms, imported on first use
__all__ = ["audit", "eventlog", "facts", "memory", "projector", "records", "sinks", "trajectory", "user_view"]


__getattr__ = lazy_modules(__name__, __all__)
