"""The CLI's and dashboard's Kafka side: read run State, send commands, wait for their outcome.

- `StateReader` (run states and views from the compacted topics) lives in runfacts.client.reader
  (the client reads with it too); it is imported here for the CLI and the console.
- `CommandClient.send(command)` notes the end of the run's events partition, produces the
  command (idempotent producer, key runId, murmur2), then reads the events partition from
  that offset for the events whose causationId is the commandId. The decider writes a
  command's events in one transaction, so once the first is visible (read_committed) the
  rest are too: reading on to the partition's end collects them all.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition

from runfacts.client.reader import ReaderSettings, StateReader, reader_consumer
from runfacts.ids import check_command
from runfacts.logread import consume_ready, partition_count, watermarks
from runfacts.ops.control import Outcome
from runfacts.partitioning import partition_for
from runfacts.processors.policy.sources import SourceKeys, sign
from runfacts.schemas.codec import Codec
from runfacts.schemas.common import CommandBase, EventBase
from runfacts.schemas.errors import InfrastructureError
from runfacts.schemas.models import decode_event
from runfacts.settings import KafkaSettings
from runfacts.topics import TopicNames

Headers = list[tuple[str, bytes]]

__all__ = ["CommandClient", "Headers", "ReaderSettings", "StateReader"]


class CommandClient:
    """Sends commands to the commands topic and waits for the run decider's outcome."""

    def __init__(self, kafka: KafkaSettings, names: TopicNames, codec: Codec | None = None,
                 settings: ReaderSettings | None = None, sources: SourceKeys | None = None,
                 protect: Callable[[CommandBase], CommandBase] | None = None) -> None:
        self.kafka, self.names, self.sources = kafka, names, sources  # sources: sign for the actor's authSource
        self.protect = protect  # seals personal fields before signing (runfacts.privacy)
        self.codec = codec or Codec()
        self.settings = settings or ReaderSettings()
        self._producer: Producer | None = None

    def producer(self) -> Producer:
        if self._producer is None:
            self._producer = Producer(self.kafka.producer_config(
                **{"enable.idempotence": True, "acks": "all", "linger.ms": 0}))
        return self._producer

    def send(self, command: CommandBase, headers: Headers | None = None, wait: bool = True) -> Outcome:
        """Produce `command`; with wait, return the events the decider answered it with.
        A command outside the contract's limits (`runfacts.ids`) raises `ContractViolation`, unsent."""
        check_command(command)
        if not wait:
            self._produce(command, headers)
            return Outcome(command, ())
        consumer = reader_consumer(self.kafka, self.names, self.settings)
        try:
            tp = self._events_partition(consumer, command.runId)
            start = watermarks(consumer, tp, self.settings.metadata_timeout_s)[1]
            self._produce(command, headers)
            tp.offset = start
            consumer.assign([tp])
            return Outcome(command, tuple(self._collect(consumer, command)))
        finally:
            consumer.close()

    def _events_partition(self, consumer: Consumer, run_id: str) -> TopicPartition:
        count = partition_count(consumer, self.names.events, self.settings.metadata_timeout_s)
        return TopicPartition(self.names.events, partition_for(run_id.encode(), count))

    def _produce(self, command: CommandBase, headers: Headers | None) -> None:
        producer = self.producer()
        errors: list[str] = []

        def delivered(err: KafkaError | None, _msg: Any) -> None:
            if err is not None:
                errors.append(str(err))

        # confluent's stub types headers as an invariant list of (str, str | bytes | None)
        if self.protect is not None:
            command = self.protect(command)
        value = self.codec.encode(command)
        signed = sign(self.sources, command.actor.authSource, value) if self.sources is not None else []
        all_headers: list[tuple[str, str | bytes | None]] = [*self.codec.headers(command), *signed, *(headers or [])]
        producer.produce(self.names.commands, value, command.runId.encode(),
                         headers=all_headers, on_delivery=delivered)
        left = producer.flush(self.settings.outcome_timeout_s)
        if left or errors:
            why = errors[0] if errors else "not delivered in time"
            raise InfrastructureError(f"sending {command.commandType} {command.commandId} to "
                                      f"{self.names.commands}: {why}", retryable=True)

    def _collect(self, consumer: Consumer, command: CommandBase) -> list[EventBase]:
        """The command's events: wait for the first, then read on to the partition's end."""
        found: list[EventBase] = []
        deadline = time.monotonic() + self.settings.outcome_timeout_s
        while time.monotonic() < deadline:
            for msg in consume_ready(consumer, 500, 0.05):
                err = msg.error()
                if err is not None:
                    if err.code() == KafkaError._PARTITION_EOF and found:
                        return found
                    continue
                value = msg.value()
                if value is None:  # a tombstone is no command's outcome
                    continue
                env = self.codec.decode_envelope(value)
                if getattr(env, "causationId", None) == command.commandId:
                    found.append(decode_event(self.codec, value))
        if found:
            return found
        raise InfrastructureError(
            f"no outcome for {command.commandType} {command.commandId} on run {command.runId} within "
            f"{self.settings.outcome_timeout_s}s: is the run decider running?", retryable=True)

    def close(self) -> None:
        if self._producer is not None:
            self._producer.flush(5)
            self._producer = None
