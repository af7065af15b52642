"""The relay's Kafka side: publish a batch of outbox rows in one Kafka transaction.

One transactional.id per outbox: a relay that takes over calls init_transactions, which
aborts a dead relay's open transaction and fences a stale one at the broker. Consumers read
with isolation.level=read_committed (librdkafka's default), so a batch is seen all or none.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from confluent_kafka import KafkaError, KafkaException, Producer

from runfacts.connectors.outbox.store import OutboxRow
from runfacts.connectors.outbox.writer import decode_headers
from runfacts.connectors.relay.decisions import Failure
from runfacts.partitioning import pin_partitioner
from runfacts.schemas.errors import InfrastructureError


@dataclass(frozen=True)
class PublisherSettings:
    """How to reach Kafka; `config` adds or overrides librdkafka producer settings."""

    bootstrap: str
    transactional_id: str
    timeout_s: float = 30.0
    config: dict[str, Any] = field(default_factory=dict)

    def producer_config(self) -> dict[str, Any]:
        return pin_partitioner({
            "bootstrap.servers": self.bootstrap,
            "transactional.id": self.transactional_id,
            "enable.idempotence": True,
            "acks": "all",
            "linger.ms": 2,
            "batch.num.messages": 10000,
            "queue.buffering.max.messages": 200000,
            "transaction.timeout.ms": 60000,
            **self.config,
        }, "relay producer config")  # murmur2 like the Java client and every runfacts producer


def _error(exc: KafkaException) -> KafkaError:
    return exc.args[0]


def _describe(err: KafkaError) -> str:
    return f"{err.name()}: {err.str()}"


class KafkaPublisher:
    """A transactional producer publishing outbox rows (key = runId, eventId header)."""

    def __init__(self, settings: PublisherSettings) -> None:
        self.settings = settings
        self.producer = Producer(settings.producer_config())
        self._topics: set[str] = set()
        try:
            self.producer.init_transactions(settings.timeout_s)
        except KafkaException as exc:
            raise self._fatal("init_transactions", _describe(_error(exc))) from exc

    def missing_topics(self, topics: set[str]) -> set[str]:
        """The topics in `topics` that the cluster does not have (checked once per known topic)."""
        missing = set()
        for topic in topics - self._topics:
            meta = self.producer.list_topics(topic=topic, timeout=self.settings.timeout_s)
            info = meta.topics.get(topic)
            if info is None or info.error is not None:
                missing.add(topic)
            else:
                self._topics.add(topic)
        return missing

    def publish(self, rows: Sequence[OutboxRow]) -> list[Failure]:
        """Publish all rows in one transaction; [] when committed, else why nothing was.

        Raises InfrastructureError when the producer itself failed (fatal, e.g. fenced by a
        successor): drop this publisher; only a relay still holding the lease makes a new one.
        """
        try:
            return self._transaction(rows)
        except (KafkaException, SystemError) as exc:
            # confluent-kafka surfaces a fatal error inside flush() as a SystemError; the
            # transaction API then names it (e.g. _FENCED).
            raise self._fatal("publish", self._diagnose(exc)) from exc

    def _transaction(self, rows: Sequence[OutboxRow]) -> list[Failure]:
        failures: list[Failure] = []
        self.producer.begin_transaction()
        for row in rows:
            self._produce(row, failures)
        remaining = self.producer.flush(self.settings.timeout_s)
        if remaining:
            failures.append(Failure(None, f"_TIMED_OUT: {remaining} records undelivered"))
        if failures:
            self._abort()
            return failures
        return self._commit()

    def _diagnose(self, exc: BaseException) -> str:
        if isinstance(exc, KafkaException):
            return _describe(_error(exc))
        try:
            self.producer.abort_transaction(1.0)
        except KafkaException as fatal:
            return _describe(_error(fatal))
        return str(exc)

    def _produce(self, row: OutboxRow, failures: list[Failure]) -> None:
        def on_delivery(err: KafkaError | None, _msg: Any) -> None:
            if err is not None:
                failures.append(Failure(row.seq, _describe(err)))

        # confluent's stub types headers as an invariant list of (str, str | bytes | None)
        headers: list[tuple[str, str | bytes | None]] = [*decode_headers(row.headers)]
        while True:
            try:
                self.producer.produce(row.topic, value=row.value, key=row.run_id.encode(), headers=headers,
                                      on_delivery=on_delivery)
                return
            except BufferError:
                self.producer.poll(0.05)
            except KafkaException as exc:
                failures.append(Failure(row.seq, _describe(_error(exc))))
                return

    def _commit(self) -> list[Failure]:
        for _ in range(3):
            try:
                self.producer.commit_transaction(self.settings.timeout_s)
                return []
            except KafkaException as exc:
                err = _error(exc)
                if err.txn_requires_abort():
                    self._abort()
                    return [Failure(None, _describe(err))]
                if not err.retriable():
                    raise self._fatal("commit_transaction", _describe(err)) from exc
        raise InfrastructureError("commit_transaction kept failing", retryable=True)

    def _abort(self) -> None:
        try:
            self.producer.abort_transaction(self.settings.timeout_s)
        except KafkaException as exc:
            raise self._fatal("abort_transaction", _describe(_error(exc))) from exc

    def _fatal(self, what: str, why: str) -> InfrastructureError:
        return InfrastructureError(f"{what} on {self.settings.transactional_id}: {why}",
                                   retryable=True)

    def close(self) -> None:
        """Drop the producer (an open transaction is aborted by the next init_transactions)."""
        self.producer.purge()
        self.producer.flush(0)
