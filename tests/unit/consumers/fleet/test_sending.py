"""RoutedSender: which of a lane's two topics a routed request is produced to."""

from __future__ import annotations

import asyncio
from typing import Any

from consumers.fleet.router import FleetRouter
from consumers.fleet.sending import lane_sender, lane_topics
from topics.events import SynthesisRequest
from topics.fleet import LaneLoad, WorkerStatus
from topics.specs import topic_names

NAMES = topic_names("t.")


class Producer:
    def __init__(self) -> None:
        self.sent: list[tuple[str, bytes, int | None]] = []

    async def send(self, topic: str, value: bytes, *, key: bytes, partition: int | None,
                   headers: list[Any]) -> asyncio.Future[None]:
        self.sent.append((topic, key, partition))
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        done.set_result(None)
        return done


def request(i: int) -> SynthesisRequest:
    return SynthesisRequest(request_id=f"r{i}", voice_id="narrator", text="Hello.")


def test_each_lane_names_its_plain_and_its_shard_topic() -> None:
    assert lane_topics(NAMES, "batch") == ("t.tts.requests", "t.tts.requests.shards")
    assert lane_topics(NAMES, "interactive") == ("t.tts.requests.interactive",
                                                 "t.tts.requests.interactive.shards")


async def test_a_sharded_route_goes_to_the_shard_topic_and_no_view_to_the_plain_one() -> None:
    producer = Producer()
    router = FleetRouter(partitions=2, wall_ms=lambda: 1_000)
    seen: list[tuple[str, str]] = []
    sender = lane_sender(producer, NAMES, "interactive", router,
                         on_route=lambda lane, reason: seen.append((lane, reason)))
    await sender.send(request(0))  # no statuses yet: the plain voice_id, Kafka partitions
    lanes = {"interactive": LaneLoad(partitions=[0, 1], topic_partitions=2, shards=[0, 1, 2],
                                     shard_partitions=3)}
    router.apply(WorkerStatus(worker="w0", at_ms=1_000, interval_ms=500, lanes=lanes))
    route, _ = await sender.send(request(1))
    assert route.sharded and route.worker == "w0"
    assert producer.sent == [("t.tts.requests.interactive", b"narrator", None),
                             ("t.tts.requests.interactive.shards", route.key.encode(),
                              route.partition)]
    assert seen == [("interactive", "unrouted"), ("interactive", "home")]
    assert sender.reasons == {"unrouted": 1, "home": 1}
