"""Live streams that resume (shell): a run's records of one topic as Server-Sent Events.

Each stream reads the run's partition (`partition_for(runId)`) of the events topic (or of the
user-view topic) with a read_committed consumer of its own, from the beginning or from just
after the position a reconnecting client names in `Last-Event-ID`, and keeps the run's records.
Every event's `id` is its Kafka position `<partition>:<offset>`, so a client that reconnects
with the last id it saw resumes exactly after it: no gap, no duplicate (offsets within one
partition are the log's order; an aborted transaction's records are never read).

A slow reader cannot grow memory: at most `queue_max` records wait for one stream; past that
the stream ends with a `retry:` hint (the browser's EventSource reconnects with its
`Last-Event-ID` and continues from there). A comment line every `heartbeat_s` keeps proxies
from closing an idle stream.
"""

from __future__ import annotations

import asyncio
import json
import logging
import threading
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any

from confluent_kafka import OFFSET_BEGINNING, KafkaError, TopicPartition

from runfacts.gateway.problems import ProblemError
from runfacts.logread import ReadOptions, consumer, partition_count
from runfacts.partitioning import partition_for
from runfacts.projections import user_view
from runfacts.schemas.codec import Codec
from runfacts.schemas.common import EventBase
from runfacts.settings import KafkaSettings

log = logging.getLogger("runfacts.gateway")
SMALL_FETCH = {"queued.min.messages": 1000, "fetch.max.bytes": 1 << 20, "max.partition.fetch.bytes": 1 << 20,
               "enable.partition.eof": False}
Decode = Callable[[bytes | None], tuple[str, dict[str, Any]] | None]


@dataclass(frozen=True)
class StreamSettings:
    queue_max: int = 1_000
    """Records at most waiting for one reader; past that the stream ends with a retry hint."""
    heartbeat_s: float = 15.0
    retry_ms: int = 1_000
    """The reconnect delay the stream suggests (`retry:`)."""
    poll_s: float = 0.2


def parse_position(value: str, field: str) -> tuple[int, int]:
    """(partition, offset) of `<partition>:<offset>`; a 400 problem naming `field` otherwise."""
    part, sep, offset = value.partition(":")
    if not sep or not part.isdigit() or not offset.isdigit() or len(value) > 40:
        raise ProblemError(400, "bad-position", "Not a stream position", f"{field}={value[:60]!r}",
                           field=field, fix="send back an event's id exactly as received, e.g. '3:1042'")
    return int(part), int(offset)


def decode_event(codec: Codec) -> Decode:
    def decode(value: bytes | None) -> tuple[str, dict[str, Any]] | None:
        if value is None:
            return None
        event = codec.decode(value)
        if not isinstance(event, EventBase):
            return None
        return event.eventType, event.model_dump(mode="json")
    return decode


def decode_view(value: bytes | None) -> tuple[str, dict[str, Any]] | None:
    if value is None:
        return "view.archived", {}
    return "view", user_view.schema().decode(value)


def frame(event_id: str | None, kind: str, data: Any) -> bytes:
    lines = [] if event_id is None else [f"id: {event_id}"]
    lines += [f"event: {kind}", "data: " + json.dumps(data, separators=(",", ":"), default=str)]
    return ("\n".join(lines) + "\n\n").encode()


_END = object()
ABANDONED_S = 30.0
"""A stream whose response never started reading within this long stops its consumer."""


class RunStream:
    """One reader's stream: a consumer thread feeding a bounded hand-over to the event loop."""

    def __init__(self, kafka: KafkaSettings, topic: str, run_id: str, decode: Decode,
                 settings: StreamSettings = StreamSettings(), component: str = "gateway") -> None:
        self.kafka, self.topic, self.run_id, self.decode, self.settings = kafka, topic, run_id, decode, settings
        self._consumer = consumer(kafka, ReadOptions(component=component, client=SMALL_FETCH))
        self._stop = threading.Event()
        self._queue: asyncio.Queue[Any] = asyncio.Queue()
        self._waiting = 0
        self._lock = threading.Lock()
        self.overflowed = False
        self.reading = False
        self.partition = -1
        self._thread: threading.Thread | None = None

    def open(self, after: tuple[int, int] | None, field: str = "Last-Event-ID") -> None:
        """Find the run's partition and position the consumer (blocking: call it off the loop)."""
        try:
            self.partition = partition_for(self.run_id.encode(), partition_count(self._consumer, self.topic, 10.0))
            if after is not None and after[0] != self.partition:
                raise ProblemError(400, "bad-position", "The position is not on this run's partition",
                                   f"{field}={after[0]}:{after[1]}, the run's records are on partition "
                                   f"{self.partition}", field=field, fix="send back an id of this run's stream")
            start = OFFSET_BEGINNING if after is None else after[1] + 1
            self._consumer.assign([TopicPartition(self.topic, self.partition, start)])
        except BaseException:
            self._consumer.close()
            raise

    def start(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._thread = threading.Thread(target=self._read, name=f"gateway-sse-{self.run_id}", daemon=True)
        self._thread.start()

    def _hand(self, item: Any) -> None:
        self._loop.call_soon_threadsafe(self._queue.put_nowait, item)

    def _read(self) -> None:
        key = self.run_id.encode()
        started = time.monotonic()
        try:
            while not self._stop.is_set():
                if not self.reading and time.monotonic() - started > ABANDONED_S:
                    break  # the response never started sending (the client left first)
                first = self._consumer.poll(self.settings.poll_s)  # returns as soon as one record is there
                batch = [] if first is None else [first, *self._consumer.consume(499, 0)]
                for msg in batch:
                    error = msg.error()
                    if error is not None:
                        if error.code() == KafkaError._PARTITION_EOF:
                            continue
                        raise RuntimeError(str(error))
                    if msg.key() != key:
                        continue
                    decoded = self.decode(msg.value())
                    if decoded is None:
                        continue
                    with self._lock:
                        if self._waiting >= self.settings.queue_max:
                            self.overflowed = True
                            self._stop.set()
                            break
                        self._waiting += 1
                    self._hand((f"{msg.partition()}:{msg.offset()}", *decoded))
        except Exception as exc:  # noqa: BLE001 - the reader learns it, the stream ends with a retry hint
            log.warning("stream of %s on %s stopped: %s", self.run_id, self.topic, exc)
        finally:
            self._consumer.close()
            self._hand(_END)

    async def frames(self) -> AsyncIterator[bytes]:
        """The SSE byte frames: a retry hint first, then records; ends with a retry hint when the
        reader fell `queue_max` behind (or the broker read failed)."""
        self.reading = True
        yield f"retry: {self.settings.retry_ms}\n\n".encode()
        try:
            while True:
                try:
                    item = await asyncio.wait_for(self._queue.get(), self.settings.heartbeat_s)
                except TimeoutError:
                    yield b": keep-alive\n\n"
                    continue
                if item is _END:
                    why = "slow reader: reconnect with Last-Event-ID" if self.overflowed else "stream ended"
                    yield f": {why}\nretry: {self.settings.retry_ms}\n\n".encode()
                    return
                with self._lock:
                    self._waiting -= 1
                yield frame(*item)
        finally:
            self.close()

    def close(self) -> None:
        self._stop.set()


__all__ = ["RunStream", "StreamSettings", "decode_event", "decode_view", "frame", "parse_position"]
