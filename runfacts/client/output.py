"""A run's partial output (shell): tokens and progress text an agent streams while it works, on
the run-keyed topic `<prefix>.run.output` (bounded retention, 6 h; NOT part of the run's facts:
no decider reads it, nothing is decided from it).

Each chunk is `(runId, stream, seq)`: `stream` names one output of the run (`"answer"`, a
step's id), `seq` counts its chunks from 0, so a chunk's id `<runId>/<stream>/<seq>` is the
same when a writer that crashed is retried and writes it again. A reader hands a chunk only
when its `seq` is above the last one it handed for that stream (`Seen`): an agent that
re-emits its output from the start (or from where it stopped, `OutputWriter.written`) after a
crash never shows a reader a chunk twice, and chunks come in order. A writer that closes
writes a last chunk with `done` true (`status` "done", or "failed" when its `with` block
raised); a stream whose last chunk is not `done` stopped (the writer died, or is still
writing: its `at` says when it last wrote).

Who may write a run's output (`may_write`): an agent service (role `agent`, never the
dashboard's source) of the run's tenant; the client checks it before the first chunk, the
gateway before every POST.
"""

from __future__ import annotations

import asyncio
import json
import threading
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Literal, Protocol

from confluent_kafka import OFFSET_BEGINNING, KafkaError, Producer, TopicPartition

from runfacts.client.errors import ClientError
from runfacts.logread import ReadOptions, consumer, partition_count
from runfacts.partitioning import partition_for
from runfacts.schemas.common import Actor

if TYPE_CHECKING:
    from runfacts.settings import KafkaSettings

FORMAT = 1
"""The chunk record's format (JSON, field `v`); a reader skips records of a format it does not know."""
WRITER_ROLE = "agent"
BROWSER_SOURCE = "dashboard"
MAX_CHUNK_CHARS = 32_000
Status = Literal["done", "failed"]


@dataclass(frozen=True)
class Chunk:
    """One piece of a run's output."""

    runId: str
    stream: str
    seq: int
    text: str = ""
    done: bool = False
    status: Status | None = None
    writer: str = ""
    at: str = ""

    @property
    def id(self) -> str:
        return f"{self.runId}/{self.stream}/{self.seq}"

    def encode(self) -> bytes:
        return json.dumps({"v": FORMAT, **asdict(self)}, separators=(",", ":")).encode()


def decode(value: bytes | None) -> Chunk | None:
    """The chunk of a record value; None for a value of another format (or none)."""
    if not value:
        return None
    try:
        raw = json.loads(value)
        if not isinstance(raw, dict) or raw.pop("v", None) != FORMAT:
            return None
        return Chunk(**raw)
    except (ValueError, TypeError):
        return None


class Seen:
    """Per stream, the last seq a reader handed: `admit` is True once for each (stream, seq), in
    increasing order (a re-emitted or older chunk is False)."""

    def __init__(self) -> None:
        self.last: dict[str, int] = {}

    def admit(self, stream: str, seq: int) -> bool:
        if seq <= self.last.get(stream, -1):
            return False
        self.last[stream] = seq
        return True


class OutputForbidden(ClientError):
    """This actor may not write the run's output."""

    def __init__(self, run_id: str, actor: Actor, why: str) -> None:
        self.why = why
        super().__init__(run_id, f"{actor.subjectId} ({actor.authSource}, roles {list(actor.roles)}) may not write "
                                 f"its output: {why}; write it as the run's agent service (role {WRITER_ROLE})")


def may_write(actor: Actor, run_tenant: str | None) -> str | None:
    """Why `actor` may not write the output of a run of `run_tenant`, or None when it may (pure)."""
    if WRITER_ROLE not in actor.roles:
        return f"only an agent service (role {WRITER_ROLE}) writes a run's output"
    if actor.authSource == BROWSER_SOURCE:
        return f"the {BROWSER_SOURCE} source is a browser's, never an agent's"
    if actor.tenant is not None and run_tenant != actor.tenant:
        return f"the run is not of tenant {actor.tenant}"
    return None


def check_text(run_id: str, stream: str, text: str) -> None:
    if len(text) > MAX_CHUNK_CHARS:
        raise ClientError(run_id, f"a chunk of output stream {stream!r} holds {len(text)} characters, over "
                                  f"{MAX_CHUNK_CHARS}: write it in smaller pieces")


class OutputSink(Protocol):
    """Where a writer's chunks go (Kafka: `OutputProducer`; the test stack: a list)."""

    def send(self, chunk: Chunk) -> None: ...

    def flush(self, timeout_s: float = 30.0) -> None: ...


class MemorySink:
    """Chunks kept in a list (runfacts.testing's client)."""

    def __init__(self) -> None:
        self.chunks: list[Chunk] = []

    def send(self, chunk: Chunk) -> None:
        self.chunks.append(chunk)

    def flush(self, timeout_s: float = 30.0) -> None:
        """Nothing waits."""


def once_each(chunks: list[Chunk]) -> list[Chunk]:
    """`chunks` (log order) as a reader is handed them: each (stream, seq) once, in increasing seq."""
    seen = Seen()
    return [c for c in chunks if seen.admit(c.stream, c.seq)]


class OutputProducer:
    """The process's producer of output chunks (idempotent: a chunk is written once per send, in order)."""

    def __init__(self, kafka: KafkaSettings, topic: str) -> None:
        self.topic = topic
        self._producer = Producer(kafka.producer_config(**{"enable.idempotence": True, "acks": "all",
                                                           "linger.ms": 5}))
        self._errors: list[str] = []

    def send(self, chunk: Chunk) -> None:
        def delivered(err: KafkaError | None, _msg: Any) -> None:
            if err is not None:
                self._errors.append(str(err))
        self._producer.produce(self.topic, chunk.encode(), chunk.runId.encode(), on_delivery=delivered)
        self._producer.poll(0)

    def flush(self, timeout_s: float = 30.0) -> None:
        left = self._producer.flush(timeout_s)
        errors, self._errors = self._errors, []
        if left or errors:
            raise ClientError("", f"output chunks not written to {self.topic}: "
                                  f"{errors or [f'{left} still queued after {timeout_s:g}s']}")

    def close(self) -> None:
        self._producer.flush(10)


class OutputWriter:
    """Write one output stream of a run: `write(text)` per chunk, `close()` (or leave the `with`
    block) to mark it done. `start`: the seq of the first chunk (a retry that continues where the
    last attempt stopped passes `written + 1`; one that starts over passes 0, and readers skip
    what they had)."""

    def __init__(self, producer: OutputSink, run_id: str, stream: str, actor: Actor, start: int = 0,
                 written: int = -1) -> None:
        self.producer, self.run_id, self.stream, self.actor = producer, run_id, stream, actor
        self.seq = start
        self.written = written
        """The last seq of this stream on the topic when the writer opened (-1: none)."""
        self.closed = False
        self._lock = threading.Lock()

    def _chunk(self, text: str, done: bool = False, status: Status | None = None) -> Chunk:
        with self._lock:
            if self.closed:
                raise ClientError(self.run_id, f"output stream {self.stream!r} is closed")
            seq, self.seq = self.seq, self.seq + 1
            self.closed = done
        return Chunk(self.run_id, self.stream, seq, text, done, status, self.actor.subjectId,
                     datetime.now(UTC).isoformat())

    def write(self, text: str) -> int:
        """Queue one chunk (sent within milliseconds; `flush` waits for it); its seq."""
        check_text(self.run_id, self.stream, text)
        chunk = self._chunk(text)
        self.producer.send(chunk)
        return chunk.seq

    def flush(self) -> None:
        """Wait until every chunk written so far is on the topic."""
        self.producer.flush()

    def close(self, status: Status = "done") -> None:
        """The last chunk (`done`, with `status`), then wait until everything is on the topic."""
        if not self.closed:
            self.producer.send(self._chunk("", True, status))
        self.producer.flush()

    def __enter__(self) -> OutputWriter:
        return self

    def __exit__(self, kind: type[BaseException] | None, *_: object) -> None:
        self.close("done" if kind is None else "failed")


class AsyncOutputWriter:
    """`OutputWriter`, awaitable: `await out.write(text)`, `await out.close()`, `async with`."""

    def __init__(self, writer: OutputWriter) -> None:
        self.writer = writer

    @property
    def written(self) -> int:
        return self.writer.written

    async def write(self, text: str) -> int:
        return self.writer.write(text)  # queued, not awaited: produce() does not block

    async def flush(self) -> None:
        await asyncio.to_thread(self.writer.flush)

    async def close(self, status: Status = "done") -> None:
        await asyncio.to_thread(self.writer.close, status)

    async def __aenter__(self) -> AsyncOutputWriter:
        return self

    async def __aexit__(self, kind: type[BaseException] | None, *_: object) -> None:
        await self.close("done" if kind is None else "failed")


def read_output(kafka: KafkaSettings, topic: str, run_id: str, component: str = "client",
                timeout_s: float = 20.0) -> list[Chunk]:
    """The run's output chunks on the topic now (read_committed, to its end), each (stream, seq)
    once and in order (`Seen`)."""
    reader = consumer(kafka, ReadOptions(component=component))
    try:
        partition = partition_for(run_id.encode(), partition_count(reader, topic, timeout_s))
        tp = TopicPartition(topic, partition)
        _low, high = reader.get_watermark_offsets(tp, timeout=timeout_s, cached=False)
        seen, found = Seen(), []
        if high <= 0:
            return []
        reader.assign([TopicPartition(topic, partition, OFFSET_BEGINNING)])
        while True:
            msg = reader.poll(timeout_s)
            if msg is None:
                raise ClientError(run_id, f"reading {topic}[{partition}] stalled for {timeout_s:g}s")
            error = msg.error()
            if error is not None:
                if error.code() == KafkaError._PARTITION_EOF:
                    break
                raise ClientError(run_id, f"reading {topic}: {error}")
            if msg.key() == run_id.encode():
                chunk = decode(msg.value())
                if chunk is not None and seen.admit(chunk.stream, chunk.seq):
                    found.append(chunk)
            if (msg.offset() or 0) + 1 >= high:
                break
        return found
    finally:
        reader.close()


def last_seq(chunks: list[Chunk], stream: str) -> int:
    """The last seq of `stream` among `chunks` (-1: none)."""
    return max((c.seq for c in chunks if c.stream == stream), default=-1)


__all__ = ["AsyncOutputWriter", "Chunk", "MemorySink", "OutputForbidden", "OutputProducer", "OutputSink",
           "OutputWriter", "Seen", "decode", "last_seq", "may_write", "once_each", "read_output"]
