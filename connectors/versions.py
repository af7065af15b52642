"""The decider's current `RunVersions` on the compacted topic `<prefix>.decider.versions`.

The decider worker writes its versions there at start-up (key `current`, an idempotent
producer; one partition, compacted, so the topic holds the last value written). A client
reads the last record at connect and creates its runs on those versions, so neither side
needs RUNFACTS_RUN_VERSIONS to agree (docs/decisions/client-versions-and-follower.md).

    publish_versions(kafka.client_config(), names, ctx.current_versions)   # the decider, at start
    published_versions(kafka.client_config(), names, "client")            # None: topic empty/absent
"""

from __future__ import annotations

import logging
import time
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition

from runfacts.partitioning import pin_partitioner
from runfacts.schemas.common import RunVersions
from runfacts.schemas.errors import InfrastructureError
from runfacts.topics import TopicNames, group_prefix, reader_group

KEY = b"current"
_NO_LEADER_YET = {KafkaError.NOT_LEADER_FOR_PARTITION, KafkaError.LEADER_NOT_AVAILABLE,
                  KafkaError.UNKNOWN_TOPIC_OR_PART, KafkaError._TIMED_OUT}
log = logging.getLogger("runfacts.versions")


def _exists(config: dict[str, Any], topic: str, timeout: float) -> bool:
    from confluent_kafka.admin import AdminClient

    try:
        meta = AdminClient(dict(config)).list_topics(topic, timeout=timeout)
    except KafkaException as exc:
        raise InfrastructureError(f"reading the metadata of {topic}: {exc}", retryable=True) from exc
    found = meta.topics.get(topic)
    return found is not None and found.error is None


def _watermarks(consumer: Consumer, topic: str, timeout: float) -> tuple[int, int]:
    """The partition's watermarks, retried while its leader is not elected yet (a topic just
    created answers NOT_LEADER_FOR_PARTITION / LEADER_NOT_AVAILABLE for a moment)."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            low, high = consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=max(1.0, timeout / 5))
            return low, high
        except KafkaException as exc:
            error = exc.args[0]
            if not getattr(error, "retriable", lambda: False)() and error.code() not in _NO_LEADER_YET:
                raise InfrastructureError(f"reading the offsets of {topic}: {error}", retryable=True) from exc
            if time.monotonic() > deadline:
                raise InfrastructureError(f"reading the offsets of {topic}: {error} for {timeout:g}s",
                                          retryable=True) from exc
            time.sleep(0.2)


def publish_versions(config: dict[str, Any], names: TopicNames, versions: RunVersions,
                     timeout: float = 30.0) -> bool:
    """Write `versions` under key `current` (idempotent producer, acks=all); False when the
    topic does not exist (logged: `runfacts topics apply` creates it)."""
    topic = names.decider_versions
    if not _exists(config, topic, timeout):
        log.warning("decider versions not published: topic %s does not exist (create it with "
                    "`runfacts topics apply --prefix %s`); clients fall back to RUNFACTS_RUN_VERSIONS "
                    "or the packaged default", topic, names.prefix)
        return False
    errors: list[str] = []

    def delivered(err: KafkaError | None, _msg: Any) -> None:
        if err is not None:
            errors.append(str(err))

    producer = Producer(pin_partitioner({**config, "enable.idempotence": True, "acks": "all", "linger.ms": 0},
                                        "decider versions producer"))
    producer.produce(topic, versions.model_dump_json().encode(), KEY, on_delivery=delivered)
    left = producer.flush(timeout)
    if left or errors:
        raise InfrastructureError(f"publishing the decider's versions to {topic}: "
                                  f"{errors[0] if errors else f'not delivered within {timeout:g}s'}", retryable=True)
    log.info("decider versions published to %s: %s", topic, versions.model_dump_json())
    return True


def published_versions(config: dict[str, Any], names: TopicNames, component: str = "client",
                       timeout: float = 30.0) -> RunVersions | None:
    """The last versions the decider published, or None when the topic is absent or empty."""
    topic = names.decider_versions
    if not _exists(config, topic, timeout):
        return None
    consumer = Consumer({**config, "group.id": reader_group(group_prefix(names.prefix, component)),
                         "enable.auto.commit": False, "isolation.level": "read_committed"})
    try:
        low, high = _watermarks(consumer, topic, timeout)
        if high <= low:
            return None
        consumer.assign([TopicPartition(topic, 0, high - 1)])
        msg = consumer.poll(timeout)
        if msg is None or msg.error() is not None:
            why = "nothing within the timeout" if msg is None else str(msg.error())
            raise InfrastructureError(f"reading {topic}@{high - 1}: {why}", retryable=True)
        value = msg.value() or b""
        try:
            return RunVersions.model_validate_json(value)
        except ValueError as exc:
            raise InfrastructureError(f"{topic}@{high - 1} is not RunVersions JSON ({exc}); "
                                      "the decider writes it at start", retryable=False) from exc
    finally:
        consumer.close()
