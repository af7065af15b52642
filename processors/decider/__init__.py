"""The decider: the single writer of the run events. `decide(command, state, ctx)` turns a
command into events, `evolve` folds events into `RunState`.

Pure: core (decide, decide_evolve), context (DecideContext, Draft, Rejected), state (RunState),
timers (which timers a run needs), state_json. Rooms: commands/ (the handlers: run, tools,
compensation, children, memory; pure), evolve/ (the fold; pure). Shell: app (DeciderShell, the
engine application), codec (the shell-side reader), security (policy and keyring -> the
DecideContext checks), history (a run's past events, for states stored before they kept their
evidence).
The worker factory is runfacts.workers:decider.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from runfacts.doorway import lazy_names

if TYPE_CHECKING:
    from runfacts.processors.decider.app import DeciderShell
    from runfacts.processors.decider.context import DecideContext
    from runfacts.processors.decider.core import decide, decide_evolve
    from runfacts.processors.decider.evolve import evolve
    from runfacts.processors.decider.state import RunState

# the doorway is lazy: importing one module of this room does not load the others
_HOME = {
    "DecideContext": "context",
    "DeciderShell": "app",
    "RunState": "state",
    "decide": "core",
    "decide_evolve": "core",
    "evolve": "evolve",
}
__all__ = ["DecideContext", "DeciderShell", "RunState", "decide", "decide_evolve", "evolve"]


__getattr__ = lazy_names(__name__, _HOME)
