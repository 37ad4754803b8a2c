"""The wire contract: topic specs, v1 events and codecs, partitioning. No torch, no Kafka loop."""

from topics.partitioning import murmur2, partition_for

__all__ = ["murmur2", "partition_for"]
