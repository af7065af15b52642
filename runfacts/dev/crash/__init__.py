"""The crash harness behind `runfacts dev crash`: kill real workers at crash points and check
the outcome against an oracle.

Pure: oracle (what must hold). Shells: workload (the fuzz tests' input; a wall clock by default),
rows (the crash matrix: processes, Kafka, randomness), kafka (its own broker), postgres (its own
database), procs (worker processes), stage (Lab).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from runfacts.doorway import lazy_names

if TYPE_CHECKING:
    from runfacts.dev.crash.oracle import verdict
    from runfacts.dev.crash.rows import rows, run_row
    from runfacts.dev.crash.stage import Lab

# the doorway is lazy: importing one module of this room does not load the others
_HOME = {"Lab": "stage", "rows": "rows", "run_row": "rows", "verdict": "oracle"}
__all__ = ["Lab", "rows", "run_row", "verdict"]


__getattr__ = lazy_names(__name__, _HOME)
