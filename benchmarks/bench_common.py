"""What every benchmark processor shares: the event envelope, its Avro codec, the reduction
and the progress file the harness watches. Depends on fastavro only, so the Quix and Faust
virtualenvs import it too (the harness puts this folder on their PYTHONPATH).
"""

from __future__ import annotations

import io
import json
import os
import random
import time
import uuid

from fastavro import parse_schema, schemaless_reader, schemaless_writer

ENVELOPE = parse_schema({
    "type": "record", "name": "RunEvent", "namespace": "runfacts.bench",
    "fields": [
        {"name": "eventId", "type": "string"},
        {"name": "eventType", "type": "string"},
        {"name": "runId", "type": "string"},
        {"name": "turnId", "type": "string"},
        {"name": "producer", "type": "string"},
        {"name": "reasoningObjectId", "type": ["null", "string"], "default": None},
        {"name": "capabilityId", "type": ["null", "string"], "default": None},
        {"name": "correlationId", "type": "string"},
        {"name": "causationId", "type": ["null", "string"], "default": None},
        {"name": "schemaVersion", "type": "int"},
        {"name": "occurredAt", "type": {"type": "long", "logicalType": "timestamp-millis"}},
        {"name": "payload", "type": "bytes"},
    ],
})
EVENT_TYPES = ("run.started", "reasoning.recorded", "tool.call.proposed", "tool.call.authorized",
               "tool.call.dispatching", "tool.call.completed", "approval.required", "run.completed")


def encode(event: dict) -> bytes:
    out = io.BytesIO()
    schemaless_writer(out, ENVELOPE, event)
    return out.getvalue()


def decode(raw: bytes) -> dict:
    return schemaless_reader(io.BytesIO(raw), ENVELOPE, None)


def generate(events: int, runs: int, seed: int = 7) -> list[tuple[bytes, bytes]]:
    """(runId key, Avro envelope) pairs: realistic ~300-byte envelopes over `runs` runs."""
    rnd = random.Random(seed)
    run_ids = [str(uuid.UUID(int=rnd.getrandbits(128), version=4)) for _ in range(runs)]
    base = 1_780_000_000_000
    pairs = []
    for i in range(events):
        run = run_ids[rnd.randrange(runs)]
        payload = json.dumps({"tool": "refund", "orderId": f"order-{rnd.randrange(10**6):06d}",
                              "amountCents": rnd.randrange(10**5), "step": i}).encode()
        pairs.append((run.encode(), encode({
            "eventId": str(uuid.UUID(int=rnd.getrandbits(128), version=4)),
            "eventType": EVENT_TYPES[i % len(EVENT_TYPES)], "runId": run,
            "turnId": str(uuid.UUID(int=rnd.getrandbits(128), version=4)),
            "producer": "agent-harness/1.4.2",
            "reasoningObjectId": str(uuid.UUID(int=rnd.getrandbits(128), version=4)),
            "capabilityId": "cap.payments.refund" if i % 3 == 0 else None,
            "correlationId": run, "causationId": None, "schemaVersion": 1,
            "occurredAt": base + i, "payload": payload})))
    return pairs


def reduce(prev: bytes | None, raw: bytes, event: dict) -> tuple[bytes, bytes]:
    """The benchmark reduction: per-run count + last event (state), one JSON output."""
    count = (int.from_bytes(prev[:8], "big") if prev else 0) + 1
    state = count.to_bytes(8, "big") + raw
    out = json.dumps({"runId": event["runId"], "count": count, "eventId": event["eventId"],
                      "eventType": event["eventType"]}).encode()
    return state, out


class Progress:
    """Writes the wall time of the first and of the `expect`-th processed event to a file."""

    def __init__(self, path: str, expect: int) -> None:
        self.path, self.expect, self.seen = path, expect, 0

    def tick(self) -> None:
        self.seen += 1
        if self.seen == 1 or self.seen == self.expect:
            with open(self.path, "a", encoding="utf-8") as fh:
                fh.write(f"{self.seen} {time.time():.6f} {os.getpid()}\n")
