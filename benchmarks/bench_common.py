"""What every benchmark processor shares: the event envelope, its Avro codec, the reduction
and the progress file the harness watches. Depends on fastavro and the standard library only,
so the Quix and Faust virtualenvs import it too (the harness puts this folder on their
PYTHONPATH).

The shared decoder is chosen by BENCH_DECODER (the harness sets it for every processor alike):
  avrocode (default) - runfacts' schema-compiled Avro reader (schemas/binary/readers.py, pure
                       Python, loaded from its file so the peers' virtualenvs run the very same
                       code without installing runfacts); every field decoded, the record must
                       consume the buffer exactly; timestamps stay epoch-millisecond ints;
  fastavro           - fastavro.schemaless_reader (timestamps become datetimes).
"""

from __future__ import annotations

import importlib.util
import io
import json
import os
import random
import sys
import time
import types
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from fastavro import parse_schema, schemaless_reader, schemaless_writer

SCHEMAS_DIR = Path(__file__).resolve().parent.parent / "schemas"
SCHEMA: dict[str, Any] = {
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
}
ENVELOPE = parse_schema(dict(SCHEMA))
DECODER = os.environ.get("BENCH_DECODER", "avrocode")
EVENT_TYPES = ("run.started", "reasoning.recorded", "tool.call.proposed", "tool.call.authorized",
               "tool.call.dispatching", "tool.call.completed", "approval.required", "run.completed")


def encode(event: dict) -> bytes:
    out = io.BytesIO()
    schemaless_writer(out, ENVELOPE, event)
    return out.getvalue()


def fastavro_decode(raw: bytes) -> dict:
    return schemaless_reader(io.BytesIO(raw), ENVELOPE, None)


def _load(name: str, path: Path) -> types.ModuleType:
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def avrocode_decoder() -> Callable[[bytes], dict]:
    """The compiled reader of the envelope, from runfacts' schemas/binary/readers.py. The peer venvs
    (Faust, Quix) do not install runfacts, so the two module files it needs are loaded by path
    under their package names (pure Python, standard library only)."""
    try:
        from runfacts.schemas.binary import readers as avrocode
    except ImportError:
        for package in ("runfacts", "runfacts.schemas", "runfacts.schemas.binary"):
            sys.modules.setdefault(package, types.ModuleType(package))
        _load("runfacts.schemas.binary.varint", SCHEMAS_DIR / "binary" / "varint.py")
        avrocode = _load("runfacts.schemas.binary.readers", SCHEMAS_DIR / "binary" / "readers.py")
    return avrocode.checked(avrocode.compile_reader(SCHEMA), "bench envelope")


def decoder(name: str) -> Callable[[bytes], dict]:
    """The shared decoder called `name`."""
    if name == "fastavro":
        return fastavro_decode
    if name == "avrocode":
        return avrocode_decoder()
    raise ValueError(f"BENCH_DECODER must be avrocode or fastavro, not {name!r}")


decode = decoder(DECODER)


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
    """Writes, at the first and at the `expect`-th processed event, the wall time and this
    process's CPU time (user + system of all its threads: librdkafka's and RocksDB's too)."""

    def __init__(self, path: str, expect: int) -> None:
        self.path, self.expect, self.seen = path, expect, 0

    def tick(self) -> None:
        self.seen += 1
        if self.seen == 1 or self.seen == self.expect:
            wall, cpu = time.time(), time.process_time()
            with open(self.path, "a", encoding="utf-8") as fh:
                fh.write(f"{self.seen} {wall:.6f} {os.getpid()} {cpu:.6f}\n")
