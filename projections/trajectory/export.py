"""`runfacts trajectories export`: the latest trajectory of every run, as JSONL or Avro.

Source: the compacted trajectory topic (the latest value per runId wins, tombstones delete),
or the events log folded directly (`from_events`), which needs no trajectory topic. Output
is sorted by runId, one trajectory per line (JSONL) or per record (an Avro Object Container
File with the Trajectory v1 schema), so two exports of the same data are byte-identical.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from runfacts.logread import ReadOptions, batches, log_range
from runfacts.projections.eventlog import EventReader
from runfacts.projections.sinks import ContainerFile
from runfacts.projections.trajectory import model as trajectory_model
from runfacts.projections.trajectory import reducer as trajectory
from runfacts.schemas.errors import InvalidInput, RecordPosition
from runfacts.settings import KafkaSettings
from runfacts.topics import TopicNames

Format = Literal["jsonl", "avro"]


@dataclass(frozen=True)
class ExportSettings:
    """Where trajectories come from and where they go."""

    out: Path
    format: Format = "jsonl"
    topic: str | None = None
    """The trajectory topic (default: under the Kafka settings' prefix)."""
    from_events: bool = False
    """Fold the events topic instead of reading the trajectory topic."""
    events_topic: str | None = None
    read: ReadOptions = ReadOptions()


def export(kafka: KafkaSettings, settings: ExportSettings) -> int:
    """Write every run's latest trajectory; returns how many."""
    found = _from_events(kafka, settings) if settings.from_events else _from_topic(kafka, settings)
    rows = [found[run] for run in sorted(found)]
    if settings.format == "avro":
        out = ContainerFile(settings.out, trajectory_model.schema(), 0)
        for row in rows:
            out.append(trajectory_model.schema().write(row))
        out.close()
    else:
        with settings.out.open("w", encoding="utf-8") as handle:
            for row in rows:
                handle.write(json.dumps(row, separators=(",", ":"), ensure_ascii=False) + "\n")
    return len(rows)


def _from_topic(kafka: KafkaSettings, settings: ExportSettings) -> dict[str, dict[str, Any]]:
    topic = settings.topic or TopicNames(kafka.topic_prefix).trajectory
    schema = trajectory_model.schema()
    latest: dict[str, dict[str, Any]] = {}
    for batch in batches(kafka, log_range(kafka, topic, options=settings.read), settings.read):
        for message in batch:
            key = (message.key() or b"").decode()
            value = message.value()
            if value is None:
                latest.pop(key, None)
                continue
            try:
                latest[key] = schema.decode(value)
            except InvalidInput as exc:
                raise exc.at(_position(message)) from exc
    return latest


def _from_events(kafka: KafkaSettings, settings: ExportSettings) -> dict[str, dict[str, Any]]:
    topic = settings.events_topic or TopicNames(kafka.topic_prefix).events
    reader = EventReader(trajectory.READS)
    views: dict[str, trajectory_model.State] = {}
    for batch in batches(kafka, log_range(kafka, topic, options=settings.read), settings.read):
        for message in batch:
            fact = reader.fact(message.value(), topic, message.partition(), message.offset())
            run = fact.run_id
            views[run] = trajectory.evolve(views.get(run), fact)
    return {run: trajectory_model.as_json(view) for run, view in views.items()}


def _position(message: Any) -> RecordPosition:
    return RecordPosition(message.topic(), message.partition(), message.offset())
