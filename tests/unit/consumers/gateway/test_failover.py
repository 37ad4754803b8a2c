"""Failover: a streamed request whose worker left the view before any chunk is sent again."""

from __future__ import annotations

from typing import Any

from consumers.fleet.router import FleetRouter
from consumers.fleet.sending import RoutedSender
from consumers.gateway.failover import Failover
from topics.events import SynthesisRequest
from topics.fleet import LaneLoad, WorkerStatus, parse_routing_key
from topics.partitioning import partition_for

NOW_MS = 1_000_000


class Clock:
    t = 0.0

    def __call__(self) -> float:
        return self.t


class FakeProducer:
    def __init__(self) -> None:
        self.sent: list[tuple[str, bytes, int | None, list[tuple[str, bytes]]]] = []

    async def send(self, topic: str, value: bytes, *, key: bytes, partition: int | None,
                   headers: list[tuple[str, bytes]]) -> Any:
        self.sent.append((key.decode(), value, partition, headers))
        return None


def status(worker: str, partitions: list[int], at_ms: int = NOW_MS) -> WorkerStatus:
    return WorkerStatus(worker=worker, at_ms=at_ms, interval_ms=500, lanes={
        "interactive": LaneLoad(partitions=partitions, slots=3)})


def setup() -> tuple[Clock, FleetRouter, FakeProducer, RoutedSender, dict[str, int]]:
    clock = Clock()
    router = FleetRouter(partitions=4, clock=clock, wall_ms=lambda: NOW_MS)
    router.apply(status("w0", [0, 1]))
    router.apply(status("w1", [2, 3]))
    producer = FakeProducer()
    sender = RoutedSender(producer, "tts.requests.interactive", "interactive", router)
    return clock, router, producer, sender, {}


REQUEST = SynthesisRequest(request_id="call-1", voice_id="brand", text="Hello.", stream=True)


async def test_a_request_on_a_gone_worker_is_sent_again_to_a_live_one() -> None:
    clock, router, producer, sender, chunks = setup()
    failover = Failover(sender, chunks_of=lambda rid: chunks.get(rid, 0), after_s=0.25,
                        clock=clock)
    route, _ = await sender.send(REQUEST, headers=[("vf-reply-partition", b"3")])
    failover.track(REQUEST, route, [("vf-reply-partition", b"3")])
    survivor = "w1" if route.worker == "w0" else "w0"
    clock.t = 1.0  # the survivor keeps reporting; the first worker falls silent
    router.apply(status(survivor, [2, 3] if survivor == "w1" else [0, 1], at_ms=NOW_MS + 1000))
    assert await failover.check() == 0  # 1.0 s: still within 3 x 500 ms of its status
    clock.t = 1.6
    assert await failover.check() == 1
    key, value, partition, headers = producer.sent[-1]
    assert parse_routing_key(key)[0] == "brand" and partition == partition_for(key, 4)
    assert partition in ([2, 3] if survivor == "w1" else [0, 1])
    assert headers == [("vf-reply-partition", b"3")] and value == producer.sent[0][1]
    assert router.outstanding == 1  # the re-route replaced the first count
    assert await failover.check() == 0  # the survivor is alive: nothing more to do


async def test_no_failover_once_a_chunk_came_or_while_the_worker_lives() -> None:
    clock, _router, _producer, sender, chunks = setup()
    failover = Failover(sender, chunks_of=lambda rid: chunks.get(rid, 0), after_s=0.25,
                        clock=clock)
    route, _ = await sender.send(REQUEST)
    failover.track(REQUEST, route, [])
    clock.t = 1.0
    assert await failover.check() == 0  # slow, not gone
    chunks["call-1"] = 1
    clock.t = 5.0
    assert await failover.check() == 0 and failover.tracked == 0  # answering: forgotten


async def test_with_no_other_live_worker_it_waits() -> None:
    clock, _router, producer, sender, _chunks = setup()
    failover = Failover(sender, chunks_of=lambda rid: 0, after_s=0.25,
                        clock=clock)
    route, _ = await sender.send(REQUEST)
    failover.track(REQUEST, route, [])
    clock.t = 5.0  # everyone silent
    assert await failover.check() == 0 and len(producer.sent) == 1
    assert failover.tracked == 1
