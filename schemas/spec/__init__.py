"""EDIT HERE to change the contract: the field language, the event and command specs, and the
tools that turn them into .avsc files, models and golden files.

Pure: fields (the field language), events and commands (the specs), samples, compat
(`runfacts schemas check` rules). Generators (write files): generate, modelgen, golden.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from runfacts.schemas.spec.compat import check_catalog
    from runfacts.schemas.spec.fields import TypeSpec, all_types

# the doorway is lazy: importing one module of this room does not load the others
_HOME = {"TypeSpec": "fields", "all_types": "fields", "check_catalog": "compat"}
__all__ = ["TypeSpec", "all_types", "check_catalog"]


def __getattr__(name: str) -> Any:
    if name in _HOME:
        return getattr(importlib.import_module(f"{__name__}.{_HOME[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
