"""The processor engine: runs an `Application` (sources, a `process` function, stores, timers)
on Kafka with exactly-once or at-least-once commits, and its test driver.

Pure: api (the processor interface; `Context` is a Protocol), versions (the stored records'
versions and their migrations). Shells: task, store
(RocksDB/memory), timers (the timer index), changelog, commit, runner (class Engine),
settings (EngineSettings, the broker settings of the engine), worker
(`python -m runfacts.processors.engine.worker --app module:factory`), gctune.
Public test utility: testdriver (TestDriver runs an application without a broker).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from runfacts.doorway import lazy_names

if TYPE_CHECKING:
    from runfacts.processors.engine.api import Application, Context, Record, Source, Timer
    from runfacts.processors.engine.runner import Engine
    from runfacts.processors.engine.settings import EngineSettings, load_settings
    from runfacts.processors.engine.testdriver import TestDriver

# the doorway is lazy: importing one module of this room does not load the others
_HOME = {
    "Application": "api",
    "Context": "api",
    "Engine": "runner",
    "EngineSettings": "settings",
    "Record": "api",
    "Source": "api",
    "TestDriver": "testdriver",
    "Timer": "api",
    "load_settings": "settings",
}
__all__ = [
    "Application",
    "Context",
    "Engine",
    "EngineSettings",
    "Record",
    "Source",
    "TestDriver",
    "Timer",
    "load_settings",
]


__getattr__ = lazy_names(__name__, _HOME)
