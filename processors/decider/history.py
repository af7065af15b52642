"""The run's past events for the one migration that needs them (shell): a run state stored before
`RunState.evidence` existed (`state_json.lacks_evidence`) gets its evidence window rebuilt from
the run's events on the events topic, the first time the decider loads it.

`EventHistory(config, topic)(run_id)` is the run's (eventId, eventType) pairs in log order. It reads
the run's partition once, read_committed, to its end, and keeps only evidence-grade ids per run:
the state of a run that still lacks them was committed with its last events (one transaction), so
every one of them is before that end, and a later run of the same partition asks the same pass.
Events removed by retention cannot be rebuilt: the window then holds what the topic still has.
"""

from __future__ import annotations

import logging
from typing import Any

from confluent_kafka import Consumer, KafkaError, TopicPartition

from runfacts.logread import consume_ready, partition_count, watermarks
from runfacts.partitioning import partition_for
from runfacts.processors.decider.state import EVIDENCE_TYPES, EVIDENCE_WINDOW
from runfacts.schemas.codec import Codec
from runfacts.schemas.errors import InfrastructureError

log = logging.getLogger("runfacts.decider")

__all__ = ["EventHistory"]


class EventHistory:
    """A run's evidence-grade events, read from the events topic (one pass per partition)."""

    def __init__(self, config: dict[str, Any], topic: str, codec: Codec | None = None,
                 timeout_s: float = 60.0) -> None:
        self.config, self.topic, self.timeout_s = config, topic, timeout_s
        self.codec = codec or Codec()
        self._read: dict[int, dict[str, list[tuple[str, str]]]] = {}

    def __call__(self, run_id: str) -> list[tuple[str, str]]:
        consumer = self._consumer()
        try:
            partition = partition_for(run_id.encode(), partition_count(consumer, self.topic, self.timeout_s))
            if partition not in self._read:
                self._read[partition] = self._pass(consumer, partition)
        finally:
            consumer.close()
        found = self._read[partition].get(run_id, [])
        log.warning("run %s was stored before runfacts kept its evidence: %d evidence-grade events rebuilt "
                    "from %s[%d]", run_id, len(found), self.topic, partition)
        return found

    def _consumer(self) -> Consumer:
        return Consumer({**self.config, "group.id": "runfacts-decider-history", "enable.auto.commit": False,
                         "enable.partition.eof": True, "isolation.level": "read_committed"})

    def _pass(self, consumer: Consumer, partition: int) -> dict[str, list[tuple[str, str]]]:
        tp = TopicPartition(self.topic, partition)
        low, high = watermarks(consumer, tp, self.timeout_s)
        runs: dict[str, list[tuple[str, str]]] = {}
        if high <= low:
            return runs
        consumer.assign([TopicPartition(self.topic, partition, low)])
        reached = low
        while reached < high:
            msgs = consume_ready(consumer, 1000, self.timeout_s)
            if not msgs:
                raise InfrastructureError(f"reading {self.topic}[{partition}] for a run's evidence: nothing in "
                                          f"{self.timeout_s:.0f}s at offset {reached} of {high}", retryable=True)
            for msg in msgs:
                if msg.error() is not None:
                    if msg.error().code() == KafkaError._PARTITION_EOF:
                        reached = high  # the end a read_committed reader may read to
                        continue
                    raise InfrastructureError(f"reading {self.topic}[{partition}]: {msg.error()}",
                                              retryable=msg.error().retriable())
                reached = msg.offset() + 1
                self._keep(runs, msg.value())
        return runs

    def _keep(self, runs: dict[str, list[tuple[str, str]]], value: bytes | None) -> None:
        if value is None:
            return
        env = self.codec.decode_envelope(value)
        if env.eventType in EVIDENCE_TYPES:  # type: ignore[union-attr]
            kept = runs.setdefault(env.runId, [])
            kept.append((env.eventId, env.eventType))  # type: ignore[union-attr]
            del kept[:-EVIDENCE_WINDOW]
