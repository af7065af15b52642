"""Which partition a key lands on: Kafka's default (Java) partitioner, murmur2.

Every runfacts producer sets `partitioner=murmur2_random` (librdkafka's Java-compatible
partitioner; its default, consistent_random, hashes with CRC32 instead), so records keyed by
runId land on the same partition whichever client wrote them, and a reader can find a run's
partition of a compacted topic without scanning: `partition_for(run_id.encode(), count)`.
"""

from __future__ import annotations

PARTITIONER = "murmur2_random"
PRODUCER_PARTITIONING = {"partitioner": PARTITIONER}

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
