"""Moved to `runfacts.schemas.avrocode`/`avrowriter` (the codec uses them too); kept so old
imports work."""

from runfacts.schemas.avrocode import (
    SHORT,
    AvroDecodeError,
    Keep,
    Reader,
    Writer,
    checked,
    compile_reader,
    read_long,
    skip_long,
    write_long,
    write_string,
)
from runfacts.schemas.avrowriter import compile_writer

__all__ = ["SHORT", "AvroDecodeError", "Keep", "Reader", "Writer", "checked", "compile_reader",
           "compile_writer", "read_long", "skip_long", "write_long", "write_string"]
