"""Which partition a key lands on: Kafka's default (Java) partitioner, murmur2.

Every runfacts producer sets `partitioner=murmur2_random` (librdkafka's Java-compatible
partitioner; its default, consistent_random, hashes with CRC32 instead), so records keyed by
runId land on the same partition whichever client wrote them, and a reader can find a run's
partition of a compacted topic without scanning: `partition_for(run_id.encode(), count)`.

A run has one writer: the task of the partition its runId hashes to. Every consumer that folds
a run (the decider, the dispatcher, the projectors) refuses a record on another partition
(`misplaced`: dead-lettered with `dlq.reason` = `wrong_partition`), whatever wrote it there;
`pin_partitioner` puts the partitioner into a producer's config and refuses an override.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any

from runfacts.schemas.errors import ConfigError, InvalidInput

PARTITIONER = "murmur2_random"
PRODUCER_PARTITIONING = {"partitioner": PARTITIONER}
WRONG_PARTITION = "wrong_partition"
"""`dlq.reason` of a record on a partition other than its key's."""
KEY_MISMATCH = "key_mismatch"
"""`dlq.reason` of a record whose key is not the runId it carries."""

_SEED = 0x9747B28C
_M = 0x5BD1E995
_MASK = 0xFFFFFFFF


def murmur2(data: bytes) -> int:
    """Kafka's murmur2 (org.apache.kafka.common.utils.Utils.murmur2) as an unsigned 32-bit int."""
    length = len(data)
    h = (_SEED ^ length) & _MASK
    whole = length - length % 4
    for i in range(0, whole, 4):
        k = int.from_bytes(data[i:i + 4], "little")
        k = (k * _M) & _MASK
        k ^= k >> 24
        k = (k * _M) & _MASK
        h = ((h * _M) & _MASK) ^ k
    tail = length % 4
    if tail == 3:
        h ^= data[whole + 2] << 16
    if tail >= 2:
        h ^= data[whole + 1] << 8
    if tail >= 1:
        h ^= data[whole]
        h = (h * _M) & _MASK
    h ^= h >> 13
    h = (h * _M) & _MASK
    h ^= h >> 15
    return h


def partition_for(key: bytes, partitions: int) -> int:
    """The partition the Java client (and librdkafka's murmur2_random) picks for a non-empty key."""
    if partitions < 1:
        raise ValueError(f"partitions must be at least 1, got {partitions}")
    return (murmur2(key) & 0x7FFFFFFF) % partitions


@lru_cache(maxsize=65_536)
def owner(key: bytes, partitions: int) -> int:
    """`partition_for`, remembered (a run's records come again and again; murmur2 costs ~6 us)."""
    return partition_for(key, partitions)


def misplaced(key: bytes | None, partition: int, partitions: int | None) -> str | None:
    """Why a record keyed by a runId does not belong on `partition` of a topic of `partitions`
    (None: it does, or the partition count is unknown)."""
    if not partitions:
        return None
    if not key:
        return (f"record without a key on partition {partition}: a run's records are keyed by its runId "
                "so that one task owns the run")
    expected = owner(key, partitions)
    if expected == partition:
        return None
    shown = repr(key[:80]) + ("..." if len(key) > 80 else "")
    return (f"key {shown} belongs on partition {expected} of {partitions}, not {partition}: only the task "
            f"of partition {expected} may fold this run. Produce keyed by the runId with "
            f"partitioner={PARTITIONER} (Kafka's Java default, murmur2; librdkafka's default "
            "consistent_random hashes with CRC32) and no explicit partition; a redrive of this letter "
            "goes to its key's partition")


def pin_partitioner(config: dict[str, Any], setting: str) -> dict[str, Any]:
    """`config` with `partitioner` = murmur2_random; another partitioner in it is refused
    (`setting` names where it came from), since its records would be dead-lettered."""
    found = config.get("partitioner", PARTITIONER)
    if found != PARTITIONER:
        raise ConfigError(f"{setting}.partitioner", found,
                          f"runfacts producers must use {PARTITIONER} (murmur2, as Kafka's Java client): a "
                          "run's records on any other partition are dead-lettered; remove the setting")
    return {**config, "partitioner": PARTITIONER}


def misplaced_run_record(key: bytes | None, partition: int, partitions: int | None, run_id: str,
                         schema: str | None = None, version: int | None = None,
                         what: str = "record") -> InvalidInput | None:
    """The dead letter for a record of run `run_id` that this partition's task must not fold:
    its key is not the runId (`key_mismatch`), or it sits on another partition than the runId's
    (`wrong_partition`). None: the record belongs here."""
    expected = run_id.encode()
    if key != expected:
        shown = repr(key[:80]) if isinstance(key, bytes) else repr(key)
        return InvalidInput(f"key {shown} is not the {what}'s runId {run_id[:200]!r}: produce it keyed by its "
                            "runId", schema=schema, version=version, reason=KEY_MISMATCH)
    wrong = misplaced(expected, partition, partitions)
    if wrong is None:
        return None
    return InvalidInput(wrong, schema=schema, version=version, reason=WRONG_PARTITION)
