"""runfacts.processors: the stream processors and their engine. Imports only runfacts.schemas
and the runfacts foundation, never projections, connectors or a runfacts subpackage.

Rooms: engine/ (run applications on Kafka), decider/ (the run's single writer), dispatcher/
(tool calls, and the ports connectors implement), policy/ (access, capabilities, retry,
approval tokens). Each room's docstring says which of its modules are pure.
"""

from __future__ import annotations

from runfacts.doorway import lazy_modules

# the rooms, imported on first use
__all__ = ["decider", "dispatcher", "engine", "policy"]


__getattr__ = lazy_modules(__name__, __all__)
