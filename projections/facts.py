"""What a projection reducer receives: one stored event, where it sits, and what was read.

Reducers are pure. `Fact.event` is a plain dict in the current reader shape of the event's
type (envelope fields plus `payload`; timestamps as epoch milliseconds; arrays as lists);
`payload` is None when the host read only the envelope because the projection does not
look at that type's payload, and `event` is None when the projection reads bytes only
(the audit). `body` is the event's Avro body as written and `writer` the CRC-64-AVRO
fingerprint of the schema that wrote it (the catalog's key).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, NamedTuple

from runfacts.schemas.binary.readers import Keep

if TYPE_CHECKING:
    from runfacts.schemas.catalog import SchemaEntry

ALL = None
"""Read everything (every payload, every envelope field)."""


class Fact(NamedTuple):
    """One event as a projection sees it."""

    topic: str
    partition: int
    offset: int
    event: dict[str, Any] | None
    body: bytes
    writer: bytes

    @property
    def values(self) -> dict[str, Any]:
        """The decoded event; KeyError when the host read bytes only."""
        if self.event is None:
            raise KeyError(f"event at {self.where()} was not decoded (bytes-only fact)")
        return self.event

    @property
    def run_id(self) -> str:
        return str(self.values["runId"])

    @property
    def event_type(self) -> str:
        return str(self.values["eventType"])

    @property
    def payload(self) -> dict[str, Any]:
        """The payload; KeyError when the host read only the envelope."""
        payload = self.values["payload"]
        if payload is None:
            raise KeyError(f"payload of {self.event_type} at {self.where()} was not read")
        return payload  # type: ignore[no-any-return]

    def where(self) -> str:
        return f"{self.topic}[{self.partition}]@{self.offset}"


@dataclass(frozen=True)
class ReadSettings:
    """What a projection needs decoded."""

    payloads: Mapping[str, Keep | None] | None = ALL
    """Per event type, the payload fields to read ({field: None | nested Keep}; a None value:
    the whole payload); types not listed: envelope only (payload None). ALL: every payload."""
    envelope: frozenset[str] | None = ALL
    """Envelope fields to read (ALL: all); eventId, eventType, runId, schemaVersion always."""
    envelope_of: Mapping[str, frozenset[str]] = field(default_factory=dict)
    """Per event type, envelope fields read for that type only, on top of `envelope`."""
    decode: bool = True
    """False: bytes-only facts (event None), for projections that parse bytes themselves."""

    def keep(self, entry: SchemaEntry) -> Keep | None:
        """The field selection for one writer schema (None: everything): the envelope's
        fields, plus the payload's when `whole(type)`; for the others it selects within the
        envelope-only schema."""
        names = [f["name"] for f in entry.raw["fields"][:-1]]
        extra = self.envelope_of.get(entry.type_name, frozenset())
        envelope: Keep = {n: None for n in names if self.envelope is None or n in self.envelope
                          or n in ALWAYS or n in extra}
        if not self.whole(entry.type_name):
            return None if self.envelope is None else envelope
        payload = None if self.payloads is None else self.payloads[entry.type_name]
        if self.envelope is None and payload is None:
            return None
        return {**envelope, "payload": payload}

    def whole(self, type_name: str) -> bool:
        return self.payloads is None or type_name in self.payloads


ALWAYS = frozenset({"eventId", "eventType", "runId", "schemaVersion"})
