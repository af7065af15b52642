"""runfacts.projections: read models folded from the events log.

Pure: facts (what a reducer receives), records (projection wire schemas), user_view, memory
(the memory view: confirmed, unexpired, unrevoked entries per scope).
Shells: eventlog (bytes -> Fact, live and replay), sinks (topic and directory sinks).
Rooms: audit/, trajectory/, projector/ (the live projector and the replay job).
"""

from __future__ import annotations

import importlib
from typing import Any

# the rooms, imported on first use
__all__ = ["audit", "eventlog", "facts", "memory", "projector", "records", "sinks", "trajectory", "user_view"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        return importlib.import_module(f"{__name__}.{name}")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
