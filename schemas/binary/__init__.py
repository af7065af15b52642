"""Schema-specialised Avro readers and writers: compiled per schema, pure Python.

Pure: readers, writers, varint.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from runfacts.schemas.binary.readers import compile_reader
    from runfacts.schemas.binary.varint import AvroDecodeError
    from runfacts.schemas.binary.writers import compile_writer

# the doorway is lazy: importing one module of this room does not load the others
_HOME = {"AvroDecodeError": "varint", "compile_reader": "readers", "compile_writer": "writers"}
__all__ = ["AvroDecodeError", "compile_reader", "compile_writer"]


def __getattr__(name: str) -> Any:
    if name in _HOME:
        return getattr(importlib.import_module(f"{__name__}.{_HOME[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
