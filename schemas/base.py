"""Base of every contract model: frozen, no extra fields, millisecond UTC timestamps."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated

from pydantic import AfterValidator, AwareDatetime, BaseModel, ConfigDict


class Record(BaseModel):
    """A frozen value mirroring an Avro record (field names are the Avro names)."""

    model_config = ConfigDict(frozen=True, extra="forbid")


def to_millis_utc(value: datetime) -> datetime:
    """The instant in UTC, truncated to whole milliseconds (what timestamp-millis can carry)."""
    value = value.astimezone(UTC)
    return value.replace(microsecond=value.microsecond - value.microsecond % 1000)


Millis = Annotated[AwareDatetime, AfterValidator(to_millis_utc)]
"""An Avro timestamp-millis: timezone-aware, UTC, millisecond precision."""
