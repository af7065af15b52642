"""runfacts.projections: read models folded from the events log.

Pure: facts (what a reducer receives), records (projection wire schemas), user_view, memory
(the memory view: confirmed, unexpired, unrevoked entries per scope).
Shells: eventlog (bytes -> Fact, live and replay), sinks (topic and directory sinks).
Rooms: audit/, trajectory/, projector/ (the live projector and the replay job).

One shape to copy for a new projection: audit/ and trajectory/. A room of its own holds the
pure reducer (one `Fact` folded into the run's small state: `trajectory.evolve`, `audit.link`,
over facts decoded per its `READS`) and its record model (a `records.ProjectionSchema`); the
one shared shell, `projector/app.py`, hosts every such reducer in the engine's exactly-once
transaction (store, emit and input offset commit together), and `projector/replay.py` hosts the
same reducer for `runfacts replay`, so the live topic and a rebuild are byte-identical.
docs/extending.md "Add a projection" is the checklist.

The user view is the exception, on purpose: it is a function of the run state, not of the
events, and is published by the decider (`user_view.publisher`) in the decider's own
transaction, with the state it shows. A UI that reads its run's view at version N sees exactly
the state the decider wrote at N, with no projector lag and no second fold of the events to
keep equal to the decider's.

Memory keeps its flat module and its own shell (`projector/memory.py`), and is not brought into
the shape: it is one pure module (a room is three or more), and its shell is a separate engine
application on purpose (its own consumer group under the projector's ACL prefix, its own store
keyed run|memory, a compacted topic keyed by scope, `runfacts worker memory`), so folding it into
the shared shell would change deployments and ACLs for no gain in what a reader copies.
"""

from __future__ import annotations

from runfacts.doorway import lazy_modules

# the rooms, imported on first use
__all__ = ["audit", "eventlog", "facts", "memory", "projector", "records", "sinks", "trajectory", "user_view"]


__getattr__ = lazy_modules(__name__, __all__)
