"""The lag sampler's arithmetic: committed offsets against begin/end offsets, per partition
and summed (the offsets come from stand-ins for the admin client and the consumer)."""

from __future__ import annotations

from dataclasses import dataclass

from aiokafka import TopicPartition

from consumers.gateway.lag import LagSampler


@dataclass
class Committed:
    offset: int


class Admin:
    async def list_consumer_group_offsets(self, group_id: str, partitions: list[TopicPartition]
                                          ) -> dict[TopicPartition, Committed]:
        assert group_id == "vf-synth"
        return {TopicPartition("t", 0): Committed(5), TopicPartition("t", 2): Committed(9),
                TopicPartition("t.shards", 1): Committed(4)}


class Offsets:
    async def beginning_offsets(self, tps: list[TopicPartition]) -> dict[TopicPartition, int]:
        return {tp: (3 if tp.partition == 1 else 0) for tp in tps}

    async def end_offsets(self, tps: list[TopicPartition]) -> dict[TopicPartition, int]:
        return {TopicPartition("t", 0): 8, TopicPartition("t", 1): 7, TopicPartition("t", 2): 9,
                TopicPartition("t.shards", 0): 2, TopicPartition("t.shards", 1): 6}


async def test_the_lag_is_kept_per_partition_and_summed() -> None:
    sampler = LagSampler(admin=lambda: Admin(), offsets=lambda: Offsets(),
                         topics=[("t", 3), ("t.shards", 2)], group_id="vf-synth",
                         interval_s=1.0)
    assert sampler.by_partition == {}
    # p0: 8 - 5 committed; p1: nothing committed, 7 - 3 retained; p2: all done; the shard
    # topic's s0: nothing committed, 2 - 0; s1: 6 - 4
    assert await sampler.sample() == 11
    assert sampler.by_partition == {"0": 3, "1": 4, "2": 0, "s0": 2, "s1": 2}
