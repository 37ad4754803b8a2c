"""Worker-side spill: which plain-keyed records leave, where to, and the copy produced."""

from __future__ import annotations

from collections import Counter
from datetime import UTC, datetime
from typing import Any

import pytest
from aiokafka import ConsumerRecord, TopicPartition

from consumers.fleet.router import FleetRouter
from consumers.worker.inflight import InFlightRequest
from consumers.worker.spill import Spill
from topics.events import SynthesisRequest, encode
from topics.fleet import LaneLoad, WorkerStatus
from topics.specs import topic_names

NAMES = topic_names("t.")
NOW_MS = 1_000_000


class Producer:
    def __init__(self) -> None:
        self.sent: list[dict[str, Any]] = []

    async def send_and_wait(self, topic: str, value: bytes, **kwargs: Any) -> None:
        self.sent.append({"topic": topic, "value": value, **kwargs})


def fleet(loads: dict[str, int]) -> FleetRouter:
    """Workers with 4 of 8 shard partitions each (plain partitions: the first only)."""
    router = FleetRouter(partitions=2, wall_ms=lambda: NOW_MS)
    for i, (worker, load) in enumerate(loads.items()):
        lanes = {lane: LaneLoad(partitions=[0] if i == 0 else [], topic_partitions=2,
                                shards=list(range(4 * i, 4 * i + 4)), shard_partitions=4 *
                                len(loads), slots=2, queued=load)
                 for lane in ("batch", "interactive")}
        router.apply(WorkerStatus(worker=worker, at_ms=NOW_MS, interval_ms=500, lanes=lanes))
    return router


def request(topic: str, i: int = 0) -> InFlightRequest:
    req = SynthesisRequest(request_id=f"r{i}", voice_id="narrator", text="A line.")
    rec: ConsumerRecord[bytes, bytes] = ConsumerRecord(
        topic=topic, partition=0, offset=i, timestamp=1_700_000_000_000, timestamp_type=0,
        key=b"narrator", value=encode(req), checksum=None, serialized_key_size=8,
        serialized_value_size=0, headers=[("vf-reply-partition", b"3")])
    return InFlightRequest(rec, TopicPartition(topic, 0), req,
                           datetime.fromtimestamp(1_700_000_000, UTC), lane="batch")


def spill(loads: dict[str, int], producer: Producer | None = None) -> Spill:
    return Spill(worker_id="me", producer=producer or Producer(), names=NAMES,
                 router=fleet(loads), queue=8)


def test_a_short_queue_keeps_its_records() -> None:
    assert spill({"me": 7, "other": 0}).target(request(NAMES.requests), queued=7) is None


def test_a_long_queue_sends_plain_keyed_overflow_to_a_less_loaded_worker() -> None:
    route = spill({"me": 20, "other": 0}).target(request(NAMES.requests), queued=20)
    assert route is not None and route.worker == "other" and route.sharded
    assert route.partition in range(4, 8)  # other's shard partitions


def test_a_record_moves_once_at_most_and_never_to_an_equally_busy_worker() -> None:
    busy = spill({"me": 20, "other": 0})
    assert busy.target(request(NAMES.requests_shards), queued=20) is None  # already routed
    assert spill({"me": 9, "other": 8}).target(request(NAMES.requests), queued=9) is None


def test_without_another_worker_in_the_view_nothing_moves() -> None:
    assert spill({"me": 30}).target(request(NAMES.requests), queued=30) is None


async def test_the_copy_keeps_value_headers_and_timestamp_and_is_counted() -> None:
    producer = Producer()
    s = spill({"me": 20, "other": 0}, producer)
    req = request(NAMES.requests)
    route = s.target(req, queued=20)
    assert route is not None
    assert s.router.load("batch", "other") == 1  # counted at the decision, until its status
    await s.forward(req, route)
    assert producer.sent == [{"topic": NAMES.requests_shards, "value": req.record.value,
                              "key": route.key.encode(), "partition": route.partition,
                              "timestamp_ms": 1_700_000_000_000,
                              "headers": [("vf-reply-partition", b"3")]}]
    assert s.router.load("batch", "other") == 1  # the send does not count it twice


def test_one_fetch_worth_of_decisions_spreads_over_every_other_worker() -> None:
    """A fetch decides for all its records before any copy is acknowledged: each decision
    must see the ones before it, or a whole backlog lands on one worker."""
    s = spill({"me": 40, "a": 0, "b": 0})
    routes = [s.target(request(NAMES.requests, i), queued=40) for i in range(30)]
    by_worker = Counter(r.worker for r in routes if r is not None)
    assert set(by_worker) == {"a", "b"} and abs(by_worker["a"] - by_worker["b"]) <= 2
    assert sum(by_worker.values()) == 30  # still well below my queue of 40 each


def test_spill_needs_a_positive_queue() -> None:
    with pytest.raises(ValueError, match="0 turns spill off"):
        Spill(worker_id="me", producer=Producer(), names=NAMES, router=fleet({}), queue=0)


# -- the worker's side: what happens to the original record ----------------------------------

class FakeCheckpoint:
    def __init__(self, owned: bool = True) -> None:
        self.owned = owned
        self.events: list[tuple[str, int]] = []

    def owns(self, tp: TopicPartition) -> bool:
        return self.owned

    def forwarded(self, tp: TopicPartition, offset: int) -> None:
        self.events.append(("forwarded", offset))

    def abandon(self, tp: TopicPartition, offset: int) -> None:
        self.events.append(("abandoned", offset))


class RefusingProducer(Producer):
    async def send_and_wait(self, topic: str, value: bytes, **kwargs: Any) -> None:
        raise RuntimeError("broker said no")


def worker_with(producer: Producer, checkpoint: FakeCheckpoint) -> Any:
    from types import SimpleNamespace
    from typing import cast

    from consumers.settings import Settings, WorkerSettings
    from consumers.worker.loop import SynthesisWorker
    from pipeline.synthesis import RequestProcessor

    worker = SynthesisWorker(settings=Settings(worker=WorkerSettings(instance_id="me")),
                             processor=cast(RequestProcessor, SimpleNamespace(
                                 answers=None, mixes_voices=False)))
    worker.checkpoint = checkpoint  # type: ignore[assignment]
    worker.spill = spill({"me": 20, "other": 0}, producer)
    return worker


@pytest.mark.parametrize(("producer", "owned", "events", "queued", "counted"), [
    (Producer(), True, [("forwarded", 0)], 0, 1.0),  # acknowledged: done here
    (RefusingProducer(), True, [], 1, 0.0),  # refused: served here after all
    (RefusingProducer(), False, [("abandoned", 0)], 0, 0.0),  # refused and revoked meanwhile
])
async def test_the_original_is_done_only_once_its_copy_is_acknowledged(
        producer: Producer, owned: bool, events: list[tuple[str, int]], queued: int,
        counted: float) -> None:
    checkpoint = FakeCheckpoint(owned)
    worker = worker_with(producer, checkpoint)
    req = request(NAMES.requests)
    route = worker.spill.target(req, queued=20)
    await worker._forward(req, route)
    assert checkpoint.events == events
    assert worker.batcher.qsize("batch") == queued
    spilled = worker.metrics.registry.get_sample_value("vf_spilled_total", {"lane": "batch"})
    assert (spilled or 0.0) == counted
