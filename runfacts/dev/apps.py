"""Small applications for tests, the crash matrix and the benchmark (factories for the worker).

`counter_app`: per key, count the records in the `counts` store and emit one output per
input: key = input key, value = JSON {"id", "key", "n", "src"} where `id` is the derived id
and `src` the input position. With `idle_ms`, each record (re)schedules an "idle" timer;
when it fires the app emits {"id", "key", "n", "idle": true} and forgets nothing.
An oracle for the counter is trivial: the n-th record of a key must yield n, exactly once.
"""

from __future__ import annotations

import json

from runfacts.processors.engine.api import Application, Context, Record, Source, Timer
from runfacts.schemas.errors import InvalidInput


def strict_utf8(data: bytes | None) -> bytes:
    """A value deserializer that rejects non-UTF-8 bytes (to exercise the dead-letter path)."""
    try:
        (data or b"").decode()
    except UnicodeDecodeError as exc:
        raise InvalidInput(f"not UTF-8: {exc.reason}", schema="demo.Utf8", version=1) from None
    return data or b""


def counter_app(name: str = "counter", source: str = "input", output: str = "output",
                idle_ms: int | str = 0, fail_on: str = "",
                dead_letter_topic: str = "runfacts.dlq", quiet_on: str = "") -> Application:
    """The counting application (parameters arrive as strings from the worker's --param); a
    record whose value is `quiet_on` is counted without an output (a quiet transaction)."""
    idle = int(idle_ms)

    def process(record: Record, ctx: Context) -> None:
        if fail_on and record.value == fail_on.encode():
            raise RuntimeError(f"asked to fail on {fail_on!r}")
        counts = ctx.store("counts")
        n = int(counts.get(record.key) or b"0") + 1
        counts.put(record.key, str(n).encode())
        if quiet_on and record.value == quiet_on.encode():
            return
        body = {"id": ctx.derive_id(0), "key": record.key.decode(), "n": n,
                "src": f"{record.topic}/{record.partition}/{record.offset}"}
        ctx.emit(output, record.key, json.dumps(body).encode())
        if idle:
            ctx.schedule(record.key, record.timestamp_ms + idle, "idle")

    def on_timer(timer: Timer, ctx: Context) -> None:
        n = int(ctx.store("counts").get(timer.key) or b"0")
        body = {"id": ctx.derive_id(0), "key": timer.key.decode(), "n": n, "idle": True}
        ctx.emit(output, timer.key, json.dumps(body).encode())

    return Application(
        name=name,
        sources=(Source(source, value_deserializer=strict_utf8),),
        process=process,
        stores=("counts",),
        on_timer=on_timer if idle else None,
        dead_letter_topic=dead_letter_topic,
    )
