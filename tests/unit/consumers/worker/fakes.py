"""Stand-ins for the aiokafka consumer and producer calls the Checkpoint makes.

They model only what pure sequencing needs: commit(offsets) that records or raises (and
moves the group's committed offsets, as the broker does), assignment() and highwater(tp),
the group's committed(tp) and the log's beginning_offsets/end_offsets (counted, so a test
sees how often the broker is asked), and producer.send() whose delivery future the test
acknowledges, fails or holds. The real broker is exercised by tests/integration.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from datetime import UTC, datetime

from aiokafka import ConsumerRecord, TopicPartition

from consumers.metrics import WorkerMetrics
from consumers.worker.checkpoint import Checkpoint
from consumers.worker.inflight import InFlightRequest
from consumers.worker.lag import LagMonitor
from consumers.worker.publisher import Publisher
from topics.events import SynthesisRequest, SynthesisResult
from topics.specs import topic_names

NAMES = topic_names("")
P0 = TopicPartition(NAMES.requests, 0)
P1 = TopicPartition(NAMES.requests, 1)


@dataclass
class FakeConsumer:
    commits: list[dict[TopicPartition, int]] = field(default_factory=list)
    fail_with: list[Exception] = field(default_factory=list)  # raised by the next commits
    assigned: set[TopicPartition] = field(default_factory=set)
    high: dict[TopicPartition, int] = field(default_factory=dict)  # from the last fetch
    group: dict[TopicPartition, int] = field(default_factory=dict)  # committed, by anyone
    start: dict[TopicPartition, int] = field(default_factory=dict)  # log start offsets
    end: dict[TopicPartition, int] = field(default_factory=dict)  # log end offsets
    reads: int = 0  # committed / beginning_offsets / end_offsets calls
    hang: bool = False  # those calls never answer (a broker that does not respond)
    read_error: Exception | None = None  # those calls raise this

    async def commit(self, offsets: dict[TopicPartition, int]) -> None:
        if self.fail_with:
            raise self.fail_with.pop(0)
        self.commits.append(dict(offsets))
        self.group.update(offsets)

    def assignment(self) -> set[TopicPartition]:
        return set(self.assigned)

    def highwater(self, tp: TopicPartition) -> int | None:
        return self.high.get(tp)

    async def _read(self) -> None:
        self.reads += 1
        if self.read_error is not None:
            raise self.read_error
        if self.hang:
            await asyncio.Event().wait()

    async def committed(self, tp: TopicPartition) -> int | None:
        await self._read()
        return self.group.get(tp)

    async def beginning_offsets(self, tps: list[TopicPartition]) -> dict[TopicPartition, int]:
        await self._read()
        return {tp: self.start.get(tp, 0) for tp in tps}

    async def end_offsets(self, tps: list[TopicPartition]) -> dict[TopicPartition, int]:
        await self._read()
        return {tp: self.end.get(tp, 0) for tp in tps}


@dataclass
class Sent:
    topic: str
    value: bytes
    key: bytes | None
    delivery: asyncio.Future[None]
    partition: int | None = None
    headers: list[tuple[str, bytes]] = field(default_factory=list)


@dataclass
class FakeProducer:
    """send() hands back a delivery future: acknowledged at once unless `hold` (the test
    resolves it) or `nack` (the broker refuses it); `fail` makes send() itself raise."""

    sent: list[Sent] = field(default_factory=list)
    hold: bool = False
    nack: Exception | None = None
    fail: Exception | None = None
    fail_times: int = 0  # with `fail`: only the next this many sends raise (0: every one)
    partitions: int = 12  # of every topic, for partitions_for

    async def send(self, topic: str, value: bytes, key: bytes | None = None,
                   partition: int | None = None,
                   headers: list[tuple[str, bytes]] | None = None) -> asyncio.Future[None]:
        if self.fail is not None:
            error = self.fail
            if self.fail_times:
                self.fail_times -= 1
                if not self.fail_times:
                    self.fail = None
            raise error
        delivery: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        if self.nack is not None:
            delivery.set_exception(self.nack)
        elif not self.hold:
            delivery.set_result(None)
        self.sent.append(Sent(topic, value, key, delivery, partition, list(headers or [])))
        return delivery

    async def partitions_for(self, topic: str) -> set[int]:
        return set(range(self.partitions))

    def acknowledge_all(self) -> None:
        for sent in self.sent:
            if not sent.delivery.done():
                sent.delivery.set_result(None)


def make_checkpoint(consumer: FakeConsumer, producer: FakeProducer,
                    metrics: WorkerMetrics | None = None,
                    lag: LagMonitor | None = None) -> Checkpoint:
    publisher = Publisher(producer=producer, names=NAMES, max_backoff_s=0.01)
    return Checkpoint(consumer=consumer, publisher=publisher,
                      metrics=metrics or WorkerMetrics(), poll_s=0.005, lag=lag)


def record(offset: int, tp: TopicPartition = P0) -> ConsumerRecord[bytes, bytes]:
    return ConsumerRecord(topic=tp.topic, partition=tp.partition, offset=offset,
                          timestamp=1_700_000_000_000, timestamp_type=0, key=b"k",
                          value=b"{}", checksum=None, serialized_key_size=1,
                          serialized_value_size=2, headers=[])


def result(offset: int) -> SynthesisResult:
    return SynthesisResult(request_id=f"r{offset}", voice_id="v1", status="succeeded",
                           completed_at="2026-12-02T00:00:00Z")


def inflight(offset: int, tp: TopicPartition = P0) -> InFlightRequest:
    request = SynthesisRequest(request_id=f"r{offset}", voice_id="v1", text="hello")
    return InFlightRequest(record(offset, tp), tp, request, datetime.now(UTC))
