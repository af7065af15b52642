"""The live projector on the engine: events topic -> audit records + eval trajectories, exactly once.

It hosts the same pure reducers `runfacts replay` hosts, so the live topics and a rebuild of
them from the log are byte-identical. Per event record (all in the engine's transaction):
1. The event's bytes become a `Fact` (the fields `trajectory.READS` needs are decoded, the
   body and writer fingerprint are kept as written); bad bytes -> the dead-letter topic, and
   so does an event whose key is not its runId or that sits on a partition other than its
   run's (`dlq.reason` `key_mismatch` | `wrong_partition`: one chain per run, one task per run).
2. Audit: load the run's chain head (store `heads`), `audit.link` the event, store the new
   head, emit the framed `AuditRecord` to the audit topic, key runId, the event's partition.
3. Trajectory: load the run's state (store `trajectories`, the trajectory's Avro body),
   `trajectory.evolve`, store it, emit the framed `Trajectory` to the compacted trajectory
   topic, key runId, the event's partition.
The engine commits both outputs, the store changelogs and the input offset atomically, so
each event has exactly one audit record even across crashes and rebalances.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from runfacts.partitioning import misplaced_run_record
from runfacts.processors.engine.api import Application, Context, Record, Source
from runfacts.projections.audit import reducer as audit
from runfacts.projections.audit.summary import AuditConfig, Summary
from runfacts.projections.eventlog import EventReader
from runfacts.projections.facts import Fact
from runfacts.projections.trajectory import model as trajectory_model
from runfacts.projections.trajectory import reducer as trajectory
from runfacts.schemas.errors import InvalidInput
from runfacts.topics import TopicNames

log = logging.getLogger("runfacts.projector")
APP_NAME = "runfacts-projector"
PII_KEY_ENV = "RUNFACTS_AUDIT_PII_KEY"
CACHE_SIZE = 10_000  # trajectory states kept parsed; the stored bytes decide whether one is current


def audit_config(environ: Mapping[str, str] | None = None) -> AuditConfig:
    """The audit settings the live projector runs with (the digest key $RUNFACTS_AUDIT_PII_KEY;
    unset: plain SHA-256). A replay of the audit reads the same, so the two are byte-identical."""
    return AuditConfig((os.environ if environ is None else environ).get(PII_KEY_ENV, "").encode())


def app_name(prefix: str) -> str:
    """The engine application (and consumer group) name of the projector."""
    return APP_NAME if prefix == "runfacts" else f"{prefix}-projector"


@dataclass
class ProjectorShell:
    """The projector's wiring: topic names, the audit's digest key, the event reader."""

    names: TopicNames
    config: AuditConfig = AuditConfig()
    reader: EventReader = field(default_factory=lambda: EventReader(trajectory.READS))
    cache: dict[bytes, tuple[bytes, trajectory_model.State]] = field(default_factory=dict, repr=False)

    def __post_init__(self) -> None:
        self._audit_frame: Callable[[bytes], bytes] = audit.schema().frame
        self._trajectory_frame: Callable[[bytes], bytes] = trajectory_model.schema().frame

    def deserialize(self, data: bytes | None) -> tuple[Fact, Summary]:
        """Step 1: every parse that can fail on bad bytes happens here, so such an event is
        dead-lettered instead of stopping the projector (the position comes in `process`)."""
        if data is None:
            raise InvalidInput("empty event (tombstone)", schema="runfacts.events")
        fact = self.reader.fact(data, "", 0, 0)
        try:
            return fact, audit.summarize(fact, self.config)
        except (ValueError, KeyError, IndexError, UnicodeDecodeError) as exc:
            raise InvalidInput(f"audit cannot read the event: {type(exc).__name__}: {exc}",
                               schema="runfacts.events") from exc

    def process(self, record: Record, ctx: Context) -> None:
        """Steps 2-3 for one event."""
        fact, summary = record.value
        refused = misplaced_run_record(record.key, record.partition, ctx.partitions, summary.run_id,
                                       "runfacts.events")
        if refused is not None:  # another partition's run: linking it here would fork its audit chain
            ctx.dead_letter(refused)
            return
        fact = fact._replace(topic=record.topic, partition=record.partition, offset=record.offset)
        self._audit(fact, summary, ctx)
        self._trajectory(summary.run_id, fact, ctx)

    def _audit(self, fact: Fact, summary: Summary, ctx: Context) -> None:
        key = summary.run_id.encode()
        heads = ctx.store("heads")
        head, body = audit.link(_head(summary.run_id, heads.get(key)), fact, summary)
        heads.put(key, head.sequence.to_bytes(8, "big") + head.digest)
        ctx.emit(self.names.audit, key, self._audit_frame(body), partition=fact.partition)

    def _trajectory(self, run_id: str, fact: Fact, ctx: Context) -> None:
        key = run_id.encode()
        store = ctx.store("trajectories")
        state = trajectory.evolve(self._load(key, store.get(key)), fact)
        body = trajectory_model.encode(state)
        store.put(key, body)
        self._remember(key, body, state)
        ctx.emit(self.names.trajectory, key, self._trajectory_frame(body), partition=fact.partition)

    def _load(self, key: bytes, raw: bytes | None) -> trajectory_model.State | None:
        if raw is None:
            return None
        cached = self.cache.get(key)
        if cached is not None and cached[0] == raw:
            return cached[1]
        return trajectory_model.decode(raw)

    def _remember(self, key: bytes, body: bytes, state: trajectory_model.State) -> None:
        cache = self.cache
        cache.pop(key, None)
        if len(cache) >= CACHE_SIZE:
            cache.pop(next(iter(cache)))
        cache[key] = (body, state)

    def application(self) -> Application:
        """The engine application for this shell."""
        names = self.names
        return Application(
            name=app_name(names.prefix),
            sources=(Source(names.events, value_deserializer=self.deserialize),),
            process=self.process, stores=("heads", "trajectories"), dead_letter_topic=names.dlq,
            metrics_topic=names.metrics,
        )


def _head(run_id: str, raw: bytes | None) -> audit.ChainHead | None:
    if raw is None:
        return None
    return audit.ChainHead(run_id, int.from_bytes(raw[:8], "big"), raw[8:])
