"""RevocationListener: revoke -> drop queued -> wait for in-flight (grace) -> commit -> forget."""

from __future__ import annotations

import asyncio
import logging
import time

import pytest

from consumers.metrics import WorkerMetrics
from consumers.worker.batching import VoiceBatcher
from consumers.worker.inflight import InFlightRequest
from consumers.worker.rebalance import RevocationListener
from tests.unit.consumers.worker.fakes import (
    P0,
    P1,
    FakeConsumer,
    FakeProducer,
    inflight,
    make_checkpoint,
    record,
    result,
)


def batcher() -> VoiceBatcher[InFlightRequest]:
    return VoiceBatcher(max_batch=4, batch_wait_s=10.0, capacity=16)


def rebalances(metrics: WorkerMetrics, kind: str) -> float:
    return metrics.registry.get_sample_value("vf_rebalances_total", {"kind": kind}) or 0.0


async def test_in_flight_work_past_the_grace_period_is_abandoned(
        caplog: pytest.LogCaptureFixture) -> None:
    consumer, producer, metrics = FakeConsumer(), FakeProducer(), WorkerMetrics()
    cp, queue = make_checkpoint(consumer, producer, metrics), batcher()
    listener = RevocationListener(checkpoint=cp, batcher=queue, metrics=metrics, grace_s=0.1)
    for offset in range(4):
        cp.begin(P0, offset)
    cp.begin(P1, 0)
    await cp.answer(P0, record(0), result=result(0))  # finished before the revocation
    producer.hold = True  # offset 1: published, never acknowledged
    stuck = asyncio.create_task(cp.answer(P0, record(1), result=result(1)))
    queue.put("v1", inflight(2))  # offset 2: still queued
    queue.put("v1", inflight(0, P1))  # another partition's work stays
    # offset 3: taken by a dispatcher, never answered within the grace period
    started = time.monotonic()
    with caplog.at_level(logging.INFO, logger="consumers.worker.rebalance"):
        await listener.on_partitions_revoked({P0})
    assert 0.1 <= time.monotonic() - started < 1.0
    assert "in-flight work on tts.requests [0] abandoned after 0 s" in caplog.text
    assert ("revoked partitions tts.requests [0] (1 queued requests left to the next owner)"
            in caplog.text)
    assert consumer.commits == [{P0: 1}]  # the finished one; none of the unfinished
    assert [r.tp for r in queue.drop(lambda r: True)] == [P1]
    assert not cp.owns(P0)
    assert rebalances(metrics, "revoked") == 1
    # The stuck publish finally lands after the partition was forgotten: nothing more.
    producer.acknowledge_all()
    await stuck
    assert await cp.commit(only=[P0]) is False
    assert consumer.commits == [{P0: 1}]
    assert cp.inflight(P1) == 1  # untouched


async def test_work_that_finishes_within_the_grace_period_is_committed() -> None:
    consumer, producer, metrics = FakeConsumer(), FakeProducer(hold=True), WorkerMetrics()
    cp = make_checkpoint(consumer, producer, metrics)
    listener = RevocationListener(checkpoint=cp, batcher=batcher(), metrics=metrics,
                                  grace_s=5.0)
    for offset in range(2):
        cp.begin(P0, offset)
    tasks = [asyncio.create_task(cp.answer(P0, record(o), result=result(o))) for o in (0, 1)]
    await asyncio.sleep(0.01)
    asyncio.get_running_loop().call_later(0.05, producer.acknowledge_all)
    started = time.monotonic()
    await listener.on_partitions_revoked({P0})
    assert time.monotonic() - started < 1.0  # returned as soon as the work was answered
    assert consumer.commits == [{P0: 2}]
    await asyncio.gather(*tasks)


async def test_a_failed_publish_during_revocation_commits_nothing() -> None:
    consumer, producer, metrics = FakeConsumer(), FakeProducer(hold=True), WorkerMetrics()
    cp = make_checkpoint(consumer, producer, metrics)
    listener = RevocationListener(checkpoint=cp, batcher=batcher(), metrics=metrics,
                                  grace_s=5.0)
    cp.begin(P0, 0)
    task = asyncio.create_task(cp.answer(P0, record(0), result=result(0)))
    await asyncio.sleep(0.01)
    producer.sent[0].delivery.set_exception(RuntimeError("not a broker error"))
    await listener.on_partitions_revoked({P0})
    with pytest.raises(RuntimeError):
        await task
    assert consumer.commits == []


async def test_assignment_takes_a_revoked_partition_back() -> None:
    metrics = WorkerMetrics()
    cp = make_checkpoint(FakeConsumer(), FakeProducer(), metrics)
    listener = RevocationListener(checkpoint=cp, batcher=batcher(), metrics=metrics,
                                  grace_s=0.0)
    await listener.on_partitions_revoked(set())  # an empty revocation is a no-op
    assert rebalances(metrics, "revoked") == 0
    await listener.on_partitions_revoked({P0, P1})
    await listener.on_partitions_assigned({P0})
    assert cp.owns(P0) and not cp.owns(P1)
    assert (rebalances(metrics, "revoked"), rebalances(metrics, "assigned")) == (2, 1)


def test_partitions_are_logged_by_topic_since_the_four_lanes_share_numbers() -> None:
    from aiokafka import TopicPartition

    from consumers.worker.rebalance import by_topic

    tps = {TopicPartition("tts.requests.shards", 13), TopicPartition("tts.requests", 4),
           TopicPartition("tts.requests", 0), TopicPartition("tts.requests.shards", 4)}
    assert by_topic(tps) == "tts.requests [0, 4], tts.requests.shards [4, 13]"
    assert by_topic(set()) == "none"
