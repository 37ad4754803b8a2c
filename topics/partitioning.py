"""Kafka's default key partitioner (murmur2), byte-for-byte the Java client's.

A request keyed by voice ID must land where the Java client, aiokafka and kcat with
`partitioner=murmur2_random` put it, so that one consumer owns each voice.
"""

from __future__ import annotations

_SEED = 0x9747B28C
_M = 0x5BD1E995
_MASK = 0xFFFFFFFF


def murmur2(data: bytes) -> int:
    """32-bit murmur2 as Kafka's `Utils.murmur2`, returned as a signed Java int."""
    length = len(data)
    h = (_SEED ^ length) & _MASK
    tail_start = length & ~3
    for i in range(0, tail_start, 4):
        k = int.from_bytes(data[i : i + 4], "little")
        k = (k * _M) & _MASK
        k ^= k >> 24
        k = (k * _M) & _MASK
        h = (h * _M) & _MASK
        h ^= k
    rest = length & 3
    if rest == 3:
        h ^= data[tail_start + 2] << 16
    if rest >= 2:
        h ^= data[tail_start + 1] << 8
    if rest >= 1:
        h ^= data[tail_start]
        h = (h * _M) & _MASK
    h ^= h >> 13
    h = (h * _M) & _MASK
    h ^= h >> 15
    return h - (1 << 32) if h & 0x80000000 else h


def partition_for(key: str | bytes, partitions: int) -> int:
    """The partition Kafka's default partitioner picks for a non-null key."""
    if partitions <= 0:
        raise ValueError(f"partitions must be positive, got {partitions}")
    raw = key.encode("utf-8") if isinstance(key, str) else key
    return (murmur2(raw) & 0x7FFFFFFF) % partitions
