"""Dispatcher incarnations: each process start takes a larger number.

`next_incarnation(path, now_ms)` returns max(now_ms, last + 1), where `last` is the number
this host handed out before (kept in `path`, written with fsync and an atomic rename
before it is used), so a restart on the same host always gets a strictly greater one,
even if the wall clock stepped back. Across hosts the wall clock orders incarnations: an
instance whose clock lags the previous holder's sees its claims rejected as `stale_lease`
until its clock passes it. The lease epoch of a claim is derived from the incarnation and
the attempt (`runfacts.processors.dispatcher.core.lease_epoch`).
"""

from __future__ import annotations

import fcntl
import os
from pathlib import Path

from runfacts.schemas.errors import ConfigError


def next_incarnation(path: Path, now_ms: int) -> int:
    """A number strictly greater than any `path` recorded before, persisted first."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path.with_suffix(".lock"), "w", encoding="utf-8") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        number = max(now_ms, _last(path) + 1)
        tmp = path.with_suffix(".tmp")
        with open(tmp, "w", encoding="utf-8") as fh:
            fh.write(f"{number}\n")
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
        _fsync_dir(path.parent)
    return number


def _last(path: Path) -> int:
    if not path.exists():
        return 0
    text = path.read_text(encoding="utf-8").strip()
    if not text.isdigit():
        raise ConfigError("incarnation file", str(path), f"holds {text[:40]!r}, not an integer")
    return int(text)


def _fsync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
