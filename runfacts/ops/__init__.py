"""Operations: what the operator commands read and send.

Pure: control (commands from a RunState), views (operator and dashboard views), versions (runs
per pinned version; what migrating a run would do). Shells: client (CommandClient; StateReader
from runfacts.client.reader), dlq (dead letters: read,
plan, re-drive in one transaction), erasure (recorded erasures whose keys are not yet
tombstoned: `runfacts erase status|resume`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from runfacts.doorway import lazy_names

if TYPE_CHECKING:
    from runfacts.ops.client import CommandClient, StateReader
    from runfacts.ops.control import ControlError
    from runfacts.ops.dlq import DeadLetter, redrive, redrive_plan
    from runfacts.ops.erasure import Erasure, pending, recorded
    from runfacts.ops.views import operator_summary

# the doorway is lazy: importing one module of this room does not load the others
_HOME = {
    "DeadLetter": "dlq",
    "redrive": "dlq",
    "redrive_plan": "dlq",
    "CommandClient": "client",
    "Erasure": "erasure",
    "pending": "erasure",
    "recorded": "erasure",
    "ControlError": "control",
    "StateReader": "client",
    "operator_summary": "views",
}
__all__ = ["DeadLetter", "redrive", "redrive_plan", "CommandClient", "ControlError", "Erasure", "StateReader",
           "operator_summary", "pending", "recorded"]


__getattr__ = lazy_names(__name__, _HOME)
