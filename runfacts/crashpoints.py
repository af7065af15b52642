"""Named crash points for the crash matrix (tests/crash).

A worker calls `crash_point("engine.after_produce_before_commit")` at each point where a
crash is interesting. When the environment variable RUNFACTS_CRASH_AT names that point, the
process kills itself with SIGKILL (a real kill -9: no cleanup, no flush). With
RUNFACTS_CRASH_AFTER=N it dies on the N-th time the point is reached (default 1).
Unarmed, a crash point costs one dict lookup.
"""

from __future__ import annotations

import os
import signal

_armed = os.environ.get("RUNFACTS_CRASH_AT", "")
_after = int(os.environ.get("RUNFACTS_CRASH_AFTER", "1"))
_hits: dict[str, int] = {}


def crash_point(name: str) -> None:
    """Die here with SIGKILL if this point is armed (see module docstring)."""
    if not _armed or name != _armed:
        return
    _hits[name] = _hits.get(name, 0) + 1
    if _hits[name] >= _after:
        marker = os.environ.get("RUNFACTS_CRASH_MARKER")
        if marker:
            with open(marker, "a", encoding="utf-8") as fh:
                fh.write(f"{name} pid={os.getpid()}\n")
        os.kill(os.getpid(), signal.SIGKILL)


def arm(name: str, after: int = 1) -> dict[str, str]:
    """Environment entries that arm `name` in a child process."""
    return {"RUNFACTS_CRASH_AT": name, "RUNFACTS_CRASH_AFTER": str(after)}
