"""Lazy doorways (LAYOUT rule 1): a package's `__init__` names what the room offers without
importing every module of it, so importing one module of a room does not load the others.

    _HOME = {"RunState": "state", "decide": "core"}
    __all__ = sorted(_HOME)
    __getattr__ = lazy_names(__name__, _HOME)

Nothing is imported until a name is first asked for.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterable
from typing import Any


def lazy_names(package: str, home: dict[str, str]) -> Callable[[str], Any]:
    """A module `__getattr__` serving each name of `home` from the submodule it maps to."""

    def __getattr__(name: str) -> Any:
        if name in home:
            return getattr(importlib.import_module(f"{package}.{home[name]}"), name)
        raise AttributeError(f"module {package!r} has no attribute {name!r}")

    return __getattr__


def lazy_modules(package: str, names: Iterable[str]) -> Callable[[str], Any]:
    """A module `__getattr__` serving each of `names` as the subpackage of that name."""
    known = frozenset(names)

    def __getattr__(name: str) -> Any:
        if name in known:
            return importlib.import_module(f"{package}.{name}")
        raise AttributeError(f"module {package!r} has no attribute {name!r}")

    return __getattr__


__all__ = ["lazy_modules", "lazy_names"]
