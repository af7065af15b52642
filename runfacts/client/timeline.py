"""A run's facts as a readable timeline, pure: one row per event, personal fields redacted.

Each row says when (occurredAt), what (eventType), which call or approval, who caused it
(producer) and the payload's other fields in short `name=value` form; every field the contract
marks personal (`"pii": true`) reads `[redacted]`, so an operator can read any run. Given the
data keys (an auditor's reader), the personal fields are revealed instead, through the one
`runfacts.privacy.reveal`: plain values, or `[erased]` once the subject was erased.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime
from typing import Any, NamedTuple

from runfacts.client.outcomes import Entry
from runfacts.privacy.envelope import KeyView
from runfacts.privacy.fields import reveal_dict
from runfacts.schemas.common import EventBase
from runfacts.schemas.pii import redact

SUBJECT = ("toolCallId", "approvalId")
MAX_VALUE = 48


class Row(NamedTuple):
    """One fact of the timeline."""

    at: datetime
    event_type: str
    subject: str
    producer: str
    detail: str
    offset: int


def _short(value: Any) -> str:
    if isinstance(value, dict):
        text = "{" + ", ".join(f"{k}={_short(v)}" for k, v in value.items() if v not in (None, 0, "", [], ())) + "}"
    elif isinstance(value, list | tuple):
        text = "[" + ", ".join(_short(v) for v in value) + "]"
    else:
        text = str(value)
    return text if len(text) <= MAX_VALUE else text[:MAX_VALUE - 1] + "…"


def row(offset: int, event: EventBase, keys: KeyView | None = None) -> Row:
    """The timeline row of one event (personal fields redacted, or revealed with `keys`)."""
    payload = (redact(event).payload.model_dump(mode="json") if keys is None
               else reveal_dict(event.model_dump(mode="json"), event.eventType, keys)["payload"])
    subject = next((str(payload[k]) for k in SUBJECT if payload.get(k)), "")
    detail = "  ".join(f"{k}={_short(v)}" for k, v in payload.items()
                       if k not in SUBJECT and v not in (None, "", [], ()))
    return Row(event.occurredAt, event.eventType, subject, event.producer, detail, offset)


def timeline(entries: Iterable[Entry], keys: KeyView | None = None) -> list[Row]:
    """Rows in log order."""
    return [row(entry.offset, entry.event, keys) for entry in entries]
