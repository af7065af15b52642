"""The decider's command handlers, one module per concern: what each command decides (pure).

Pure: run (lifecycle, turns, approvals, budget, timers, run-end hygiene, drains, a capability's
pause; `HANDLERS`, `create_run`, `follow_ups`), tools (the tool-call track: proposals, claims,
reports, verification, the lease an authorization carries), compensation (undoing completed
calls, newest first), children (child runs: sub-budgets, the cross-run outbox, evidence
merges), memory (memory candidates and their review).
`runfacts.processors.decider.core` dispatches a command to them; none of them holds state.
"""

from __future__ import annotations

from runfacts.doorway import lazy_modules

__all__ = ["children", "compensation", "memory", "run", "tools"]


__getattr__ = lazy_modules(__name__, __all__)
