"""Rebuild a projection from the events log into a fresh topic or a directory.

A replay hosts the same pure reducers the engine hosts, with the log as its only input:
1. snapshot the events topic's range (start: the beginning or --from-offset per partition;
   end: each partition's last stable offset now), so the replay ends even while runs go on;
2. read it in batches, read_committed, decoding only what the projection needs;
3. fold each event into its run's view (views live in a dict; reducers are pure);
4. write each output record to the partition number its events came from (log-style
   projections: one record per event, in log order; compacted ones: the final value per
   run, runs in order of first appearance, archived runs left out; the memory topic: each
   memory still confirmed, in order of proposal);
5. close the sink (flush / write the manifest) and report counts and rates.
The output depends only on the log range and the settings the live projector honours (the
audit's digest key, $RUNFACTS_AUDIT_PII_KEY: `ReplaySettings.audit`, default the live
projector's), so two replays of one log, and a replay and the live projection, are byte-identical.
"""

from __future__ import annotations

import gc
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from runfacts.logread import LogRange, ReadOptions, batches, log_range
from runfacts.projections.audit import reducer as audit
from runfacts.projections.audit.summary import AuditConfig
from runfacts.projections.eventlog import EventReader
from runfacts.projections.facts import Fact, ReadSettings
from runfacts.projections.records import ProjectionSchema
from runfacts.projections.sinks import DirSink, Sink, TopicSink
from runfacts.schemas.errors import ConfigError
from runfacts.settings import KafkaSettings
from runfacts.topics import TopicNames, TopicSpec, runfacts_topics

Emit = Callable[[int, str, bytes | None], None]
Handle = Callable[[bytes | None, int, int], None]
"""Takes one record of the events topic: (value, partition, offset)."""


class Projector(Protocol):
    """A pure reducer plus the per-run views a host keeps for it."""

    name: str
    schema: ProjectionSchema
    read: ReadSettings

    def apply(self, fact: Fact, emit: Emit) -> None: ...

    def handler(self, topic: str, emit: Emit) -> Handle:
        """The per-record function of a replay of `topic` (same output as `apply`)."""
        ...

    def finish(self, emit: Emit) -> None: ...


class AuditProjector:
    """Audit: one record per event, in log order."""

    name = "audit"
    read = ReadSettings(decode=False)

    def __init__(self, config: AuditConfig | None = None) -> None:
        self.config = config or AuditConfig()
        self.schema = audit.schema()
        self.heads: dict[str, audit.ChainHead] = {}

    def apply(self, fact: Fact, emit: Emit) -> None:
        summary = audit.summarize(fact, self.config)
        head, body = audit.link(self.heads.get(summary.run_id), fact, summary)
        self.heads[summary.run_id] = head
        emit(fact.partition, summary.run_id, body)

    def handler(self, topic: str, emit: Emit) -> Handle:
        """`apply` straight from the value: the recorder (summarize + link) is picked by the
        value's first ten bytes; other framings and bad bytes take `apply`'s path."""
        recorders, heads, config = audit.recorders(), self.heads, self.config
        sources: dict[int, bytes] = {}
        fact = EventReader(self.read).fact

        def handle(value: bytes | None, partition: int, offset: int) -> None:
            if value is None or (record := recorders.get(value[:10])) is None:
                # a tombstone, Confluent framing or not an event: the reader sorts it out
                self.apply(fact(value, topic, partition, offset), emit)
                return
            where = sources.get(partition)
            if where is None:
                where = sources[partition] = audit.source(topic, partition)
            try:
                head, body = record(value[10:], config, heads, where, offset)
            except Exception:  # noqa: BLE001 - bad bytes: `apply` raises the precise error
                self.apply(fact(value, topic, partition, offset), emit)
                raise  # (not reached: the same bytes fail the same way there)
            heads[head[0]] = head
            emit(partition, head[0], body)

        return handle

    def finish(self, emit: Emit) -> None:
        return None


class LatestProjector:
    """A compacted projection: fold every event, emit each run's final view at the end."""

    def __init__(self, name: str, schema: ProjectionSchema, read: ReadSettings,
                 evolve: Callable[[Any, Fact], Any], encode: Callable[[Any], bytes | None]) -> None:
        self.name, self.schema, self.read = name, schema, read
        self.evolve, self.encode = evolve, encode
        self.views: dict[str, Any] = {}
        self.partitions: dict[str, int] = {}

    def apply(self, fact: Fact, emit: Emit) -> None:
        run = fact.run_id
        if run not in self.partitions:
            self.partitions[run] = fact.partition
        self.views[run] = self.evolve(self.views.get(run), fact)

    def handler(self, topic: str, emit: Emit) -> Handle:
        """`apply` with the views and the reader at hand."""
        fact, evolve = EventReader(self.read).fact, self.evolve
        views, partitions = self.views, self.partitions

        def handle(value: bytes | None, partition: int, offset: int) -> None:
            read = fact(value, topic, partition, offset)
            run = _run_id(read) if read.event is None else read.event["runId"]
            if run not in partitions:
                partitions[run] = partition
            views[run] = evolve(views.get(run), read)

        return handle

    def finish(self, emit: Emit) -> None:
        for run, view in self.views.items():
            body = self.encode(view)
            if body is not None:  # None: the run is gone (archived), left out of a rebuild
                emit(self.partitions[run], run, body)


class UserViewProjector(LatestProjector):
    """The user view: run state folded with the decider's own `evolve`, viewed at the end."""

    def __init__(self, role: str = "user") -> None:
        from runfacts.processors.decider.evolve import evolve as evolve_state
        from runfacts.projections import user_view
        from runfacts.schemas.codec import Codec, CodecSettings

        codec = Codec(CodecSettings(validate=False))

        def evolve(state: Any, fact: Fact) -> Any:
            model = codec.decode(b"\xc3\x01" + fact.writer + fact.body)
            return evolve_state(state, model)  # type: ignore[arg-type]

        def encode(state: Any) -> bytes | None:
            view = user_view.user_view(state, role)  # type: ignore[arg-type]
            return None if view is None else user_view.encode(view)

        super().__init__("user-view", user_view.schema(), ReadSettings(decode=False), evolve,
                         encode)

    def apply(self, fact: Fact, emit: Emit) -> None:
        run = _run_id(fact)
        if run not in self.partitions:
            self.partitions[run] = fact.partition
        self.views[run] = self.evolve(self.views.get(run), fact)


class MemoryProjector:
    """The memory topic: every memory event projected (`memory.project`, as the live memory
    projector does), at the end each memory still confirmed, in order of proposal, to the
    partition of its run's events; memories that ended (rejected, revoked, expired) are left out."""

    name = "memory"

    def __init__(self) -> None:
        from runfacts.projections import memory

        self.memory = memory
        self.schema, self.read = memory.schema(), memory.READS
        self.live: dict[tuple[str, str], tuple[int, Any]] = {}  # (runId, memoryId) -> (partition, entry)

    def apply(self, fact: Fact, emit: Emit) -> None:
        if fact.event_type not in self.memory.MEMORY_TYPES:
            return
        memory_id = (fact.run_id, fact.payload["memoryId"])
        held = self.live.get(memory_id)
        keep, _ = self.memory.project(None if held is None else held[1], fact)
        if keep is None:
            self.live.pop(memory_id, None)
        else:
            self.live[memory_id] = (fact.partition, keep)

    def handler(self, topic: str, emit: Emit) -> Handle:
        fact = EventReader(self.read).fact

        def handle(value: bytes | None, partition: int, offset: int) -> None:
            self.apply(fact(value, topic, partition, offset), emit)

        return handle

    def finish(self, emit: Emit) -> None:
        for partition, entry in self.live.values():
            if entry.status == "confirmed":
                emit(partition, self.memory.memory_key(entry), self.memory.encode(entry))


def projectors() -> dict[str, Callable[[], Projector]]:
    """Every replayable projection by name."""
    return {"audit": AuditProjector, "trajectory": trajectory_projector,
            "user-view": UserViewProjector, "memory": MemoryProjector}


def trajectory_projector() -> Projector:
    """The trajectory as a compacted projection."""
    from runfacts.projections.trajectory import model as trajectory_model
    from runfacts.projections.trajectory import reducer as trajectory

    return LatestProjector("trajectory", trajectory_model.schema(), trajectory.READS,
                           trajectory.evolve, trajectory_model.encode)


def _run_id(fact: Fact) -> str:
    """The runId of a bytes-only fact (third envelope field)."""
    from runfacts.schemas.binary.readers import read_long

    pos = 0
    for _ in range(2):  # eventId, eventType
        length, pos = read_long(fact.body, pos)
        pos += length
    length, pos = read_long(fact.body, pos)
    return fact.body[pos:pos + length].decode()


@dataclass(frozen=True)
class ReplaySettings:
    """What to replay, from where, into what."""

    projection: str
    into: str
    """A topic name, or a directory (any value containing '/')."""
    events_topic: str | None = None
    """Default: the `events` topic under the Kafka settings' prefix."""
    from_offset: int | None = None
    """None: from the beginning; else this offset in every partition."""
    read: ReadOptions = ReadOptions()
    producer: Mapping[str, Any] = field(default_factory=dict)
    """librdkafka settings over the sink's `PRODUCER_CONFIG` (replays into a topic)."""
    audit: AuditConfig | None = None
    """The audit's settings (its digest key); None: the live projector's, from the environment
    ($RUNFACTS_AUDIT_PII_KEY, `projector.app.audit_config`), so a replay equals the live audit."""


@dataclass(frozen=True)
class ReplayReport:
    """What a replay did."""

    projection: str
    source: LogRange
    destination: str
    events: int
    records: int
    wall_s: float
    cpu_s: float

    @property
    def events_per_cpu_s(self) -> float:
        return self.events / self.cpu_s if self.cpu_s else 0.0


Progress = Callable[[int], None]


def replay(kafka: KafkaSettings, settings: ReplaySettings, log: LogRange | None = None,
           on_batch: Progress | None = None) -> ReplayReport:
    """Rebuild `settings.projection` from the events log (steps in the module docstring)."""
    factory = projectors().get(settings.projection)
    if factory is None:
        raise ConfigError("--projection", settings.projection,
                          f"unknown; choose one of {sorted(projectors())}")
    projector = AuditProjector(live_settings(settings)) if settings.projection == "audit" else factory()
    topic = settings.events_topic or TopicNames(kafka.topic_prefix).events
    log = log or log_range(kafka, topic, settings.from_offset, options=settings.read)
    sink = open_sink(kafka, settings, projector, len(log.partitions))
    return run(kafka, settings, projector, sink, log, on_batch)


def live_settings(settings: ReplaySettings) -> AuditConfig:
    """The audit settings of a replay: the given ones, else the live projector's."""
    from runfacts.projections.projector.app import audit_config

    return settings.audit if settings.audit is not None else audit_config()


def run(kafka: KafkaSettings, settings: ReplaySettings, projector: Projector, sink: Sink,
        log: LogRange, on_batch: Progress | None = None) -> ReplayReport:
    """Steps 2-5: read the range, fold, write, close."""
    handle = projector.handler(log.topic, sink.write)
    start_wall, start_cpu = time.perf_counter(), time.process_time()
    events = 0
    try:
        with relaxed_gc():
            for batch in batches(kafka, log, settings.read):
                for message in batch:
                    handle(message.value(), message.partition(), message.offset())
                events += len(batch)
                if on_batch is not None:
                    on_batch(len(batch))
            projector.finish(sink.write)
    except BaseException:
        release = getattr(sink, "release", None)  # a Kafka sink's producer: not left connecting
        if release is not None:
            release()
        raise
    destination = sink.close(log)
    return ReplayReport(projector.name, log, destination, events, sink.records,
                        time.perf_counter() - start_wall, time.process_time() - start_cpu)


@contextmanager
def relaxed_gc() -> Iterator[None]:
    """Far fewer cyclic-GC passes while folding: views are acyclic tuples and dicts, and a
    full collection over millions of them costs more than the fold itself. On the way out
    the young objects move to the oldest generation (freeze + unfreeze), so restoring the
    thresholds does not set off a collection over everything the fold allocated."""
    old = gc.get_threshold()
    gc.set_threshold(200_000, 50, 1_000)
    try:
        yield
    finally:
        gc.freeze()
        gc.set_threshold(*old)
        gc.unfreeze()


def open_sink(kafka: KafkaSettings, settings: ReplaySettings, projector: Projector,
              partitions: int) -> Sink:
    """A directory sink for a path (contains '/'), else a fresh topic like the projection's."""
    if "/" in settings.into:
        return DirSink(Path(settings.into), projector.schema, projector.name)
    return TopicSink(kafka, topic_spec(kafka, projector.name, settings.into, partitions),
                     projector.schema, settings.producer)


def topic_spec(kafka: KafkaSettings, projection: str, name: str, partitions: int) -> TopicSpec:
    """The projection topic's spec (cleanup, retention) under another name and partition count."""
    names = TopicNames(kafka.topic_prefix)
    template = {"audit": names.audit, "trajectory": names.trajectory,
                "user-view": names.user_view, "memory": names.memory}[projection]
    spec = next(s for s in runfacts_topics(names, partitions) if s.name == template)
    return TopicSpec(name, partitions, spec.cleanup_policy, spec.retention_ms, dict(spec.configs),
                     f"replay of {projection}")
