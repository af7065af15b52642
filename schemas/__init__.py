"""runfacts.schemas: the wire contract, the ground floor (imports nothing else of runfacts).

Pure: common, events, commands (generated; paths kept), base, models, construct, upcasters,
pii. Loader: catalog (parses the .avsc files in avro/ with fastavro). Shells: codec (Avro encode/decode of envelopes),
registry (optional schema registry). errors is the root of every runfacts error. Rooms:
spec/ (EDIT HERE to change the contract), binary/ (schema-specialised readers and writers).
"""

from __future__ import annotations

import importlib
from typing import Any

# the rooms, imported on first use
__all__ = [
    "base",
    "binary",
    "catalog",
    "codec",
    "commands",
    "common",
    "construct",
    "errors",
    "events",
    "models",
    "pii",
    "registry",
    "spec",
    "upcasters",
]


def __getattr__(name: str) -> Any:
    if name in __all__:
        return importlib.import_module(f"{__name__}.{name}")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
