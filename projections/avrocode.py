"""Moved to `runfacts.schemas.avrocode` (the codec uses it too); kept so old imports work."""

from runfacts.schemas.avrocode import (
    SHORT,
    AvroDecodeError,
    Keep,
    Reader,
    Writer,
    checked,
    compile_reader,
    compile_writer,
    read_long,
    skip_long,
    write_long,
    write_string,
)

__all__ = ["SHORT", "AvroDecodeError", "Keep", "Reader", "Writer", "checked", "compile_reader",
           "compile_writer", "read_long", "skip_long", "write_long", "write_string"]
