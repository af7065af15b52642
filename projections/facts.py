"""What a projection reducer receives: one stored event, where it sits, and what was read.

Reducers are pure. `Fact.event` is a plain dict in the current reader shape of the event's
type (envelope fields plus `payload`; timestamps as epoch milliseconds; arrays as lists);
`payload` is None when the host read only the envelope because the projection does not
look at that type's payload, and `event` is None when the projection reads bytes only
(the audit). `body` is the event's Avro body as written and `writer` the CRC-64-AVRO
fingerprint of the schema that wrote it (the catalog's key).
"""

from __future__ import annotations

from typing import Any, NamedTuple


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
