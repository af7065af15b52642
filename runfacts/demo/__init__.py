"""The refund story (`runfacts demo`): one run end to end on a real broker, with checks.

Shells: run (run_demo and its checks), stack (the processes the demo starts), story (the
two runs it plays), readers (what it reads back from the topics), view (the timeline it
prints).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from runfacts.demo.run import DemoResult, run_demo
    from runfacts.demo.stack import DemoOptions

# the doorway is lazy: importing one module of this room does not load the others
_HOME = {"DemoOptions": "stack", "DemoResult": "run", "run_demo": "run"}
__all__ = ["DemoOptions", "DemoResult", "run_demo"]


def __getattr__(name: str) -> Any:
    if name in _HOME:
        return getattr(importlib.import_module(f"{__name__}.{_HOME[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
