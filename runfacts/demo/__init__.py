"""The refund story (`runfacts demo`): one run end to end on a real broker, with checks.

Shells: run (run_demo and its checks), stack (the processes the demo starts), story (the
two runs it plays), readers (what it reads back from the topics), view (the timeline it
prints).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from runfacts.doorway import lazy_names

if TYPE_CHECKING:
    from runfacts.demo.run import DemoResult, run_demo
    from runfacts.demo.stack import DemoOptions

# the doorway is lazy: importing one module of this room does not load the others
_HOME = {"DemoOptions": "stack", "DemoResult": "run", "run_demo": "run"}
__all__ = ["DemoOptions", "DemoResult", "run_demo"]


__getattr__ = lazy_names(__name__, _HOME)
