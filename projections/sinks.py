"""Where a replay writes: a fresh topic, or a directory of Avro container files.

Both keep the source partitioning: a projection record goes to the partition number of the
events it came from, in the order produced, so two replays of the same log give the same
bytes partition by partition. A directory holds `part-<N>.avro` (Avro Object Container
Files, null codec, a sync marker derived from the schema and partition, so no randomness)
and `manifest.json` (source range, record counts, each file's SHA-256; no timestamps).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from confluent_kafka import Producer

from runfacts.logread import LogRange, log_range
from runfacts.projections.records import ProjectionSchema
from runfacts.schemas.binary.readers import write_long, write_string
from runfacts.schemas.errors import ConfigError, InfrastructureError
from runfacts.settings import KafkaSettings
from runfacts.topics import TopicSpec, apply_topics

OCF_MAGIC = b"Obj\x01"
BLOCK_RECORDS = 4096
PRODUCER_CONFIG: dict[str, Any] = {
    "enable.idempotence": True, "compression.type": "none", "linger.ms": 100,
    "batch.num.messages": 100_000, "queue.buffering.max.messages": 1_000_000}
"""The replay's producer: full batches (a replay is a bulk write, no latency to keep low;
`batch.size` stays at its 1 MB default, the broker's message size limit), no compression,
as the live projector writes (lz4 costs about 0.4 µs per record); `ReplaySettings.producer`
overrides any of it."""


class Sink(Protocol):
    """Receives projection records (Avro bodies, unframed) per partition."""

    records: int
    """How many records `write` was given (tombstones included)."""

    def write(self, partition: int, key: str, body: bytes | None) -> None: ...

    def close(self, log: LogRange) -> str: ...


class DirSink:
    """One Avro container file per partition plus a manifest; refuses a non-empty folder."""

    def __init__(self, folder: Path, schema: ProjectionSchema, projection: str) -> None:
        if folder.exists() and any(folder.iterdir()):
            raise ConfigError("--into", str(folder), "directory exists and is not empty")
        folder.mkdir(parents=True, exist_ok=True)
        self.folder, self.schema, self.projection = folder, schema, projection
        self._files: dict[int, ContainerFile] = {}
        self._blocks: dict[int, list[bytes]] = {}
        self.records = 0

    def write(self, partition: int, key: str, body: bytes | None) -> None:
        self.records += 1
        if body is None:
            return  # a tombstone: the key is absent from a rebuilt compacted view
        block = self._blocks.get(partition)
        if block is None:
            block = self._open(partition)
        block.append(body)
        if len(block) >= BLOCK_RECORDS:
            self._files[partition].flush()

    def _open(self, partition: int) -> list[bytes]:
        out = self._files[partition] = ContainerFile(
            self.folder / f"part-{partition:05d}.avro", self.schema, partition)
        self._blocks[partition] = out.block
        return out.block

    def close(self, log: LogRange) -> str:
        files = {}
        for partition in sorted(self._files):
            written = self._files[partition].close()
            files[written.path.name] = {"partition": partition, "records": written.records,
                                        "sha256": written.sha256}
        manifest = {"projection": self.projection, "schema": self.schema.fullname,
                    "schemaVersion": self.schema.version,
                    "fingerprint": self.schema.fingerprint.hex(),
                    "source": {"topic": log.topic, "start": _keys(log.start), "end": _keys(log.end)},
                    "files": files}
        (self.folder / "manifest.json").write_text(json.dumps(manifest, indent=2, sort_keys=True)
                                                   + "\n", encoding="utf-8")
        return str(self.folder)


def _keys(offsets: dict[int, int]) -> dict[str, int]:
    return {str(p): o for p, o in sorted(offsets.items())}


@dataclass(frozen=True)
class Written:
    path: Path
    records: int
    sha256: str


class ContainerFile:
    """An Avro Object Container File written block by block (deterministic sync marker)."""

    def __init__(self, path: Path, schema: ProjectionSchema, partition: int) -> None:
        self.path = path
        schema_json = json.dumps(schema.raw, separators=(",", ":"), sort_keys=True).encode()
        self.sync = hashlib.sha256(schema_json + str(partition).encode()).digest()[:16]
        self.digest = hashlib.sha256()
        self.handle = path.open("wb")
        self.records = 0
        self.block: list[bytes] = []
        meta = {"avro.codec": b"null", "avro.schema": schema_json}
        header = OCF_MAGIC + write_long(len(meta)) + b"".join(
            write_string(k) + write_long(len(v)) + v for k, v in sorted(meta.items()))
        self._put(header + b"\x00" + self.sync)

    def _put(self, data: bytes) -> None:
        self.handle.write(data)
        self.digest.update(data)

    def append(self, body: bytes) -> None:
        self.block.append(body)
        if len(self.block) >= BLOCK_RECORDS:
            self.flush()

    def flush(self) -> None:
        """Write the records appended to `block` so far as one block (`block` is emptied in
        place: writers may hold on to it)."""
        if not self.block:
            return
        data = b"".join(self.block)
        self._put(write_long(len(self.block)) + write_long(len(data)) + data + self.sync)
        self.records += len(self.block)
        self.block.clear()

    def close(self) -> Written:
        self.flush()
        self.handle.close()
        return Written(self.path, self.records, self.digest.hexdigest())


class TopicSink:
    """Produces framed records to a fresh topic with the source's partition count."""

    def __init__(self, settings: KafkaSettings, spec: TopicSpec, schema: ProjectionSchema,
                 producer: Mapping[str, Any] | None = None) -> None:
        apply_topics(settings, [spec])
        if _has_records(settings, spec.name):
            raise ConfigError("--into", spec.name, "topic already holds records; replay into a "
                              "fresh topic")
        self.topic, self.schema, self.prefix = spec.name, schema, schema.prefix()
        self.errors: list[str] = []
        self.records = 0
        self.producer = Producer(settings.producer_config(**{
            **PRODUCER_CONFIG, **(producer or {}),
            "on_delivery": self._delivered, "delivery.report.only.error": True}))
        self._produce = self.producer.produce

    def write(self, partition: int, key: str, body: bytes | None) -> None:
        self.records += 1
        value = None if body is None else self.prefix + body
        try:
            self._produce(self.topic, value, key.encode(), partition)
        except BufferError:
            self._wait_and_produce(partition, key.encode(), value)

    def _wait_and_produce(self, partition: int, key: bytes, value: bytes | None) -> None:
        """The producer's queue is full: serve it until the record fits."""
        while True:
            self.producer.poll(0.05)
            try:
                self._produce(self.topic, value, key, partition)
                return
            except BufferError:
                continue

    def _delivered(self, err: Any, _msg: Any) -> None:
        if err is not None:
            self.errors.append(str(err))

    def close(self, log: LogRange) -> str:
        """Flush, then end the producer (it holds this sink through its delivery callback: a
        cycle the garbage collector may never collect, `replay.relaxed_gc` freezes it, so it
        would keep connecting to the cluster for the life of the process)."""
        try:
            left = self.producer.flush(60)
        finally:
            self.release()
        if left or self.errors:
            raise InfrastructureError(f"replay into {self.topic}: {left} records undelivered, "
                                      f"errors: {self.errors[:3]}", retryable=True)
        return self.topic

    def release(self) -> None:
        """Drop the producer now (undelivered records are dropped with it); idempotent."""
        producer, self.producer, self._produce = self.producer, None, _closed  # type: ignore[assignment]
        if producer is not None:
            producer.purge()
            del producer  # the last reference: rd_kafka_destroy stops its threads here


def _closed(*_args: Any, **_kwargs: Any) -> None:
    raise InfrastructureError("replay sink is closed", retryable=False)


def _has_records(settings: KafkaSettings, topic: str) -> bool:
    return log_range(settings, topic).total > 0
