"""Named crash points for the crash matrix (tests/crash).

A worker calls `crash_point("engine.after_produce_before_commit")` at each point where a
crash is interesting. When the environment variable RUNFACTS_CRASH_AT names that point, the
process kills itself with SIGKILL (a real kill -9: no cleanup, no flush). With
RUNFACTS_CRASH_AFTER=N it dies on the N-th time the point is reached (default 1).
With RUNFACTS_CRASH_ACTION=hold it does not die: on the N-th time it writes the marker and
waits until the file RUNFACTS_CRASH_RELEASE exists, then goes on (a row breaks something
else meanwhile, e.g. restarts the database between the relay's publish and its mark).
With RUNFACTS_CRASH_FROM=<path> the point counts only hits once that file exists (a row arms it
at the moment it chooses, e.g. the next batch after a second worker joined).
Unarmed, a crash point costs one dict lookup.
"""

from __future__ import annotations

import os
import signal
import time

_armed = os.environ.get("RUNFACTS_CRASH_AT", "")
_after = int(os.environ.get("RUNFACTS_CRASH_AFTER", "1"))
_action = os.environ.get("RUNFACTS_CRASH_ACTION", "kill")
_from = os.environ.get("RUNFACTS_CRASH_FROM", "")
_hits: dict[str, int] = {}


def crash_point(name: str) -> None:
    """Die here with SIGKILL if this point is armed (see module docstring)."""
    if not _armed or name != _armed or (_from and not os.path.exists(_from)):
        return
    _hits[name] = _hits.get(name, 0) + 1
    if _hits[name] < _after or (_action == "hold" and _hits[name] > _after):
        return
    marker = os.environ.get("RUNFACTS_CRASH_MARKER")
    if marker:
        with open(marker, "a", encoding="utf-8") as fh:
            fh.write(f"{name} pid={os.getpid()}\n")
    if _action == "hold":
        release = os.environ.get("RUNFACTS_CRASH_RELEASE", "")
        while not (release and os.path.exists(release)):
            time.sleep(0.05)
        return
    os.kill(os.getpid(), signal.SIGKILL)


def arm(name: str, after: int = 1, hold_until: str = "", armed_from: str = "") -> dict[str, str]:
    """Environment entries that arm `name` in a child process; with `hold_until` (a path) the
    child waits at the point until that file exists instead of dying; with `armed_from` (a path)
    hits count only once that file exists."""
    env = {"RUNFACTS_CRASH_AT": name, "RUNFACTS_CRASH_AFTER": str(after)}
    if hold_until:
        env |= {"RUNFACTS_CRASH_ACTION": "hold", "RUNFACTS_CRASH_RELEASE": hold_until}
    if armed_from:
        env["RUNFACTS_CRASH_FROM"] = armed_from
    return env
