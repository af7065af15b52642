"""The tool dispatcher: executes tool calls the decider proposed, at most once per lease epoch,
and reconciles calls whose outcome is unknown.

Pure: core (what to do for a run: claim, execute, reconcile). The port: adapters
(ToolAdapter and ArgsReader, which runfacts.connectors implements; SealPersonal, which
runfacts.privacy implements). Shells: app
(DispatcherShell), incarnation (the fenced incarnation counter on local disk). The worker
factory is runfacts.workers:dispatcher.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from runfacts.doorway import lazy_names

if TYPE_CHECKING:
    from runfacts.processors.dispatcher.adapters import (
        ArgsMissing,
        ArgsReader,
        ArgsTampered,
        SealPersonal,
        ToolAdapter,
        ToolRequest,
    )
    from runfacts.processors.dispatcher.app import DispatcherSettings, DispatcherShell

# the doorway is lazy: importing one module of this room does not load the others
_HOME = {
    "ArgsMissing": "adapters",
    "ArgsReader": "adapters",
    "ArgsTampered": "adapters",
    "DispatcherSettings": "app",
    "DispatcherShell": "app",
    "SealPersonal": "adapters",
    "ToolAdapter": "adapters",
    "ToolRequest": "adapters",
}
__all__ = [
    "ArgsMissing",
    "ArgsReader",
    "ArgsTampered",
    "DispatcherSettings",
    "DispatcherShell",
    "SealPersonal",
    "ToolAdapter",
    "ToolRequest",
]


__getattr__ = lazy_names(__name__, _HOME)
