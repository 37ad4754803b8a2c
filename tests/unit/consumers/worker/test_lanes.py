"""Lanes on the worker: which partitions pause, the interactive deadline, co-partitioning."""

from __future__ import annotations

import logging
from datetime import UTC, datetime

import pytest
from aiokafka import TopicPartition
from aiokafka.coordinator.assignors.range import RangePartitionAssignor
from aiokafka.coordinator.assignors.roundrobin import RoundRobinPartitionAssignor
from aiokafka.coordinator.protocol import ConsumerProtocolMemberMetadata

from consumers.worker.lanes import (
    apply_pauses,
    check_assignor,
    is_shard_lane,
    lane_of,
    lane_topics,
    paused_partitions,
    with_lane_deadline,
)
from topics.events import SynthesisRequest
from topics.specs import (
    REQUESTS,
    REQUESTS_INTERACTIVE,
    REQUESTS_INTERACTIVE_SHARDS,
    REQUESTS_SHARDS,
    topic_names,
)
from topics.validation import parse_deadline

NAMES = topic_names("t.")
BATCH = {TopicPartition(NAMES.requests, p) for p in range(3)}
INTERACTIVE = {TopicPartition(NAMES.requests_interactive, p) for p in range(3)}
ASSIGNED = BATCH | INTERACTIVE


def paused(*, interactive: int, batch: int, capacity: int = 64,
           floor: int = 8) -> set[TopicPartition]:
    return paused_partitions(ASSIGNED, NAMES, interactive_queued=interactive,
                             batch_queued=batch, capacity=capacity, batch_floor=floor)


def test_the_worker_subscribes_to_both_lanes_and_tells_them_apart_by_topic() -> None:
    assert lane_topics(NAMES) == ["t.tts.requests.interactive", "t.tts.requests",
                                  "t.tts.requests.interactive.shards", "t.tts.requests.shards"]
    assert lane_of("t.tts.requests.interactive", NAMES) == "interactive"
    assert lane_of("t.tts.requests.interactive.shards", NAMES) == "interactive"
    assert lane_of("t.tts.requests", NAMES) == "batch"
    assert lane_of("t.tts.requests.shards", NAMES) == "batch"
    assert [is_shard_lane(t, NAMES) for t in lane_topics(NAMES)] == [False, False, True, True]


def test_nothing_pauses_while_queues_are_short() -> None:
    assert paused(interactive=0, batch=5) == set()


def test_batch_pauses_while_interactive_waits_and_resumes_when_it_is_gone() -> None:
    assert paused(interactive=1, batch=20) == BATCH
    assert paused(interactive=0, batch=20) == set()


def test_batch_keeps_fetching_below_its_floor_so_its_share_is_fed() -> None:
    assert paused(interactive=3, batch=7, floor=8) == set()
    assert paused(interactive=3, batch=0, floor=0) == BATCH  # share 0: strict priority


def test_a_full_batch_lane_never_holds_back_interactive_requests() -> None:
    assert paused(interactive=0, batch=64) == BATCH
    assert paused(interactive=64, batch=64) == ASSIGNED
    assert paused(interactive=64, batch=0) == INTERACTIVE


def test_an_interactive_request_without_a_deadline_gets_the_lane_default() -> None:
    received = datetime(2026, 12, 3, 4, 0, 0, 250_000, tzinfo=UTC)
    req = SynthesisRequest(request_id="r", voice_id="v", text="hi")
    out = with_lane_deadline(req, "interactive", received, 5.0)
    assert out.deadline == "2026-12-03T04:00:05.250Z"
    assert parse_deadline(out.deadline) == datetime(2026, 12, 3, 4, 0, 5, 250_000, tzinfo=UTC)
    assert with_lane_deadline(req, "batch", received, 5.0).deadline is None
    assert with_lane_deadline(req, "interactive", received, 0).deadline is None
    own = SynthesisRequest(request_id="r", voice_id="v", text="hi", deadline="2030-01-01T00:00:00Z")
    assert with_lane_deadline(own, "interactive", received, 5.0).deadline == own.deadline


# -- co-partitioning: the assignor the worker ships -------------------------------------------

class _Cluster:
    def __init__(self, partitions: dict[str, int]) -> None:
        self._partitions = partitions

    def partitions_for_topic(self, topic: str) -> set[int] | None:
        n = self._partitions.get(topic)
        return None if n is None else set(range(n))


def _owners(assignor: type[RangePartitionAssignor] | type[RoundRobinPartitionAssignor],
            members: int) -> dict[tuple[str, int], str]:
    topics = lane_topics(NAMES)
    cluster = _Cluster({NAMES.requests: REQUESTS.partitions,
                        NAMES.requests_interactive: REQUESTS_INTERACTIVE.partitions,
                        NAMES.requests_shards: REQUESTS_SHARDS.partitions,
                        NAMES.requests_interactive_shards: REQUESTS_INTERACTIVE_SHARDS.partitions})
    meta = {f"worker-{i}-{i * 7919 % 13}": ConsumerProtocolMemberMetadata(0, topics, b"")
            for i in range(members)}
    owners: dict[tuple[str, int], str] = {}
    for member, assignment in assignor.assign(cluster, meta).items():
        for topic, partitions in assignment.assignment:
            for p in partitions:
                owners[(topic, p)] = member
    return owners


@pytest.mark.parametrize("members", [1, 2, 3, 5, 7, 12, 13, 30, 48])
def test_range_puts_both_lanes_of_every_partition_on_one_member(members: int) -> None:
    assert REQUESTS_INTERACTIVE.partitions == REQUESTS.partitions
    assert REQUESTS_INTERACTIVE_SHARDS.partitions == REQUESTS_SHARDS.partitions
    owners = _owners(RangePartitionAssignor, members)
    for p in range(REQUESTS.partitions):
        assert owners[(NAMES.requests, p)] == owners[(NAMES.requests_interactive, p)], p
    for p in range(REQUESTS_SHARDS.partitions):
        assert owners[(NAMES.requests_shards, p)] == \
            owners[(NAMES.requests_interactive_shards, p)], p
    assert len(owners) == 2 * REQUESTS.partitions + 2 * REQUESTS_SHARDS.partitions
    # Past the plain lanes' 12 partitions some members own none of them, and every member
    # still owns shard partitions: what routers send there reaches the whole fleet.
    plain = {m for (t, _), m in owners.items() if t == NAMES.requests}
    sharded = {m for (t, _), m in owners.items() if t == NAMES.requests_shards}
    assert len(plain) == min(members, REQUESTS.partitions)
    assert len(sharded) == members


def test_round_robin_splits_a_voice_s_lanes_which_is_why_it_is_warned_about(
        caplog: pytest.LogCaptureFixture) -> None:
    owners = _owners(RoundRobinPartitionAssignor, 5)
    split = [p for p in range(REQUESTS.partitions)
             if owners[(NAMES.requests, p)] != owners[(NAMES.requests_interactive, p)]]
    assert len(split) >= 6  # partitions dealt round 5 members: pairs drift apart
    with caplog.at_level(logging.WARNING):
        assert check_assignor("range") is True
        assert not caplog.records
        assert check_assignor("roundrobin") is False
    assert "VF_ASSIGNOR=roundrobin does not keep a voice's two lanes on one worker" in \
        caplog.text


class _Consumer:
    """assignment/pause/resume/paused as aiokafka keeps them (paused is a subset of assigned)."""

    def __init__(self, assigned: set[TopicPartition]) -> None:
        self.assigned = assigned
        self._paused: set[TopicPartition] = set()

    def assignment(self) -> set[TopicPartition]:
        return set(self.assigned)

    def pause(self, *tps: TopicPartition) -> None:
        self._paused.update(tps)

    def resume(self, *tps: TopicPartition) -> None:
        self._paused.difference_update(tps)

    def paused(self) -> set[TopicPartition]:
        return set(self._paused)


def test_batch_partitions_pause_for_a_caller_and_resume_once_it_is_served() -> None:
    consumer = _Consumer(ASSIGNED)

    def round_(interactive: int, batch: int) -> int:
        return apply_pauses(consumer, NAMES, interactive_queued=interactive,
                            batch_queued=batch, capacity=64, batch_floor=8)

    assert round_(0, 30) == 0 and consumer.paused() == set()
    assert round_(2, 30) == 3 and consumer.paused() == BATCH
    assert round_(1, 30) == 3 and consumer.paused() == BATCH
    assert round_(0, 30) == 0 and consumer.paused() == set()  # the caller is served: resumed
    assert round_(64, 64) == 6 and consumer.paused() == ASSIGNED
    assert round_(0, 0) == 0 and consumer.paused() == set()


async def test_a_missing_lane_topic_is_named_before_joining() -> None:
    from types import SimpleNamespace

    from consumers.worker.lanes import MissingTopics, check_topics
    from topics.specs import topic_names

    names = topic_names("acme.")

    async def only_batch() -> set[str]:
        return {names.requests, names.results}

    with pytest.raises(MissingTopics, match=r"acme\.tts\.requests\.interactive, .* not found.*"
                                            r"voicefactory topics create"):
        await check_topics(SimpleNamespace(topics=only_batch), names)

    async def plain_only() -> set[str]:
        return {names.requests, names.requests_interactive}

    with pytest.raises(MissingTopics, match=r"acme\.tts\.requests\.interactive\.shards, "
                                            r"acme\.tts\.requests\.shards not found.*"
                                            r"the worker role's ACLs on them"):
        await check_topics(SimpleNamespace(topics=plain_only), names)

    async def every_lane() -> set[str]:
        return {names.requests, names.requests_interactive, names.requests_shards,
                names.requests_interactive_shards}

    await check_topics(SimpleNamespace(topics=every_lane), names)
