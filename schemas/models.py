"""Typed access to the generated contract models: payload classes, commands, events only."""

from __future__ import annotations

from functools import cache
from typing import Any, TypeVar

from runfacts.schemas.base import Record
from runfacts.schemas.catalog import default_catalog
from runfacts.schemas.codec import Codec
from runfacts.schemas.common import CommandBase, EventBase
from runfacts.schemas.errors import InvalidInput, RecordPosition

C = TypeVar("C", bound=CommandBase)


@cache
def payload_class(model: type[EventBase] | type[CommandBase]) -> type[Record]:
    """The payload model of an event or command class."""
    cls = model.model_fields["payload"].annotation
    if not (isinstance(cls, type) and issubclass(cls, Record)):
        raise TypeError(f"{model.__name__}.payload is {cls!r}, not a Record model")
    return cls


def schema_name(model: EventBase | CommandBase) -> str:
    """The Avro full name of a command's or event's schema (`runfacts.commands.CreateRun`): the
    one form dead-letter headers (`dlq.schema`) and InvalidInput use, as the codec does."""
    type_name = model.commandType if isinstance(model, CommandBase) else model.eventType
    entry = default_catalog().by_type.get(type_name)
    return entry.fullname if entry is not None else type(model).__name__


def new_command(cls: type[C], **fields: Any) -> C:
    """A validated `cls` (a concrete command class: its commandType and schemaVersion default)."""
    return cls.model_validate(fields)


def decode_event(codec: Codec, data: bytes | None, position: RecordPosition | None = None) -> EventBase:
    """The event of a framed record; InvalidInput for a tombstone or a command."""
    if data is None:
        raise InvalidInput("empty event (tombstone)", position=position, schema="runfacts.events")
    model = codec.decode(data, position)
    if not isinstance(model, EventBase):
        raise InvalidInput(f"{model.commandType} is a command, not an event", position=position,
                           schema=schema_name(model))
    return model
