"""Checkpoint: the commit sequence begin -> publish (acknowledged) -> done -> commit.

The consumer and producer are injected fakes (tests/unit/consumers/worker/fakes.py); the
real broker is exercised by tests/integration/test_worker*.py.
"""

from __future__ import annotations

import asyncio
import logging

import pytest
from aiokafka.errors import (
    CommitFailedError,
    IllegalStateError,
    KafkaConnectionError,
    RequestTimedOutError,
)

from consumers.metrics import WorkerMetrics
from consumers.worker.checkpoint import COMMIT_BURST
from consumers.worker.publisher import dead_letter
from tests.unit.consumers.worker.fakes import (
    NAMES,
    P0,
    P1,
    FakeConsumer,
    FakeProducer,
    make_checkpoint,
    record,
    result,
)


def commits_made(metrics: WorkerMetrics) -> float:
    value = metrics.registry.get_sample_value("vf_commits_total")
    return value or 0.0


async def test_answers_commit_only_the_contiguous_done_offsets() -> None:
    consumer, producer, metrics = FakeConsumer(), FakeProducer(), WorkerMetrics()
    cp = make_checkpoint(consumer, producer, metrics)
    for offset in range(3):
        assert cp.begin(P0, offset)
    await cp.answer(P0, record(2), result=result(2))
    await cp.answer(P0, record(1), result=result(1))
    assert await cp.commit() is False  # offset 0 is still in flight
    assert consumer.commits == []
    await cp.answer(P0, record(0), dlq=dead_letter(record(0), "bad bytes"))
    assert await cp.commit() is True
    assert consumer.commits == [{P0: 3}]
    assert [s.topic for s in producer.sent] == [NAMES.results, NAMES.results, NAMES.dlq]
    assert (cp.inflight(P0), cp.answered, commits_made(metrics)) == (0, 3, 1)
    assert await cp.commit() is False  # nothing moved since
    assert consumer.commits == [{P0: 3}]


async def test_a_failed_publish_commits_nothing() -> None:
    consumer, producer = FakeConsumer(), FakeProducer(fail=RuntimeError("serializer bug"))
    cp = make_checkpoint(consumer, producer)
    cp.begin(P0, 0)
    with pytest.raises(RuntimeError, match="serializer bug"):
        await cp.answer(P0, record(0), result=result(0))
    assert cp.inflight(P0) == 0  # abandoned: a revocation does not wait for it
    assert cp.answered == 0
    assert await cp.commit() is False
    assert consumer.commits == []


async def test_a_publish_that_fails_midway_holds_back_later_answers_too() -> None:
    consumer, producer = FakeConsumer(), FakeProducer()
    cp = make_checkpoint(consumer, producer)
    for offset in range(3):
        cp.begin(P0, offset)
    await cp.answer(P0, record(0), result=result(0))
    producer.fail = RuntimeError("boom")
    with pytest.raises(RuntimeError):
        await cp.answer(P0, record(1), result=result(1))
    producer.fail = None
    await cp.answer(P0, record(2), result=result(2))
    await cp.commit()
    assert consumer.commits == [{P0: 1}]  # never past the unanswered offset 1


async def test_an_unacknowledged_publish_commits_nothing_while_it_retries() -> None:
    consumer = FakeConsumer()
    producer = FakeProducer(nack=KafkaConnectionError("broker down"))
    cp = make_checkpoint(consumer, producer)
    cp.begin(P0, 0)
    task = asyncio.create_task(cp.answer(P0, record(0), result=result(0)))
    await asyncio.sleep(0.05)
    assert len(producer.sent) > 1  # Publisher keeps retrying a refused send
    assert await cp.commit() is False
    assert cp.inflight(P0) == 1
    producer.nack = None  # the broker is back: the next retry is acknowledged
    await asyncio.wait_for(task, 1.0)
    assert await cp.commit() is True
    assert consumer.commits == [{P0: 1}]


async def test_a_cancelled_publish_is_abandoned_not_done() -> None:
    consumer, producer = FakeConsumer(), FakeProducer(hold=True)
    cp = make_checkpoint(consumer, producer)
    cp.begin(P0, 0)
    task = asyncio.create_task(cp.answer(P0, record(0), result=result(0)))
    await asyncio.sleep(0.01)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert cp.inflight(P0) == 0
    assert await cp.commit() is False
    assert consumer.commits == []


@pytest.mark.parametrize("error", [CommitFailedError("rebalanced"),
                                   IllegalStateError("no longer assigned")])
async def test_a_commit_refused_after_a_rebalance_is_left_to_the_new_owner(
        error: Exception, caplog: pytest.LogCaptureFixture) -> None:
    consumer, metrics = FakeConsumer(fail_with=[error]), WorkerMetrics()
    cp = make_checkpoint(consumer, FakeProducer(), metrics)
    cp.begin(P0, 0)
    await cp.answer(P0, record(0), result=result(0))
    with caplog.at_level(logging.WARNING, logger="consumers.worker.checkpoint"):
        assert await cp.commit() is False  # logged, not raised: the worker goes on
    assert "commit of 1 partitions failed after a rebalance" in caplog.text
    assert consumer.commits == []
    assert commits_made(metrics) == 0
    # The worker goes on: more work is answered and the next round commits all of it.
    cp.begin(P0, 1)
    await cp.answer(P0, record(1), result=result(1))
    assert await cp.commit() is True
    assert consumer.commits == [{P0: 2}]


async def test_a_broker_error_on_commit_is_retried_next_round(
        caplog: pytest.LogCaptureFixture) -> None:
    consumer = FakeConsumer(fail_with=[RequestTimedOutError()])
    cp = make_checkpoint(consumer, FakeProducer())
    cp.begin(P0, 0)
    await cp.answer(P0, record(0), result=result(0))
    with caplog.at_level(logging.WARNING, logger="consumers.worker.checkpoint"):
        assert await cp.commit() is False
    assert "will retry" in caplog.text
    assert await cp.commit() is True
    assert consumer.commits == [{P0: 1}]
    assert cp.last_commit_ok > 0


async def test_revoked_partitions_are_left_out_of_periodic_commits() -> None:
    consumer = FakeConsumer()
    cp = make_checkpoint(consumer, FakeProducer())
    for tp in (P0, P1):
        cp.begin(tp, 0)
        await cp.answer(tp, record(0, tp), result=result(0))
    cp.revoke([P0])
    assert not cp.owns(P0) and cp.owns(P1)
    await cp.commit()
    assert consumer.commits == [{P1: 1}]
    await cp.commit(only=[P0])  # what the revocation itself commits
    assert consumer.commits == [{P1: 1}, {P0: 1}]
    cp.assign([P0])
    assert cp.owns(P0)


async def test_an_answer_after_forget_is_published_but_changes_nothing() -> None:
    consumer, producer = FakeConsumer(), FakeProducer(hold=True)
    cp = make_checkpoint(consumer, producer)
    cp.begin(P0, 0)
    task = asyncio.create_task(cp.answer(P0, record(0), result=result(0)))
    await asyncio.sleep(0.01)
    cp.revoke([P0])
    cp.forget([P0])
    producer.acknowledge_all()
    await task  # tracker.done on a forgotten partition: ignored, no error
    assert cp.answered == 1
    assert await cp.commit(only=[P0]) is False
    assert consumer.commits == []
    cp.assign([P0])
    assert cp.begin(P0, 0) is True  # the partition starts afresh when it comes back


async def test_a_refetched_record_is_not_begun_twice() -> None:
    cp = make_checkpoint(FakeConsumer(), FakeProducer())
    assert cp.begin(P0, 5) is True
    assert cp.begin(P0, 5) is False  # still in flight
    await cp.answer(P0, record(5), result=result(5))
    assert cp.begin(P0, 5) is False  # answered already
    assert cp.inflight(P0) == 0


async def test_abandon_and_retry_waiting_count_in_flight_work() -> None:
    cp = make_checkpoint(FakeConsumer(), FakeProducer())
    cp.begin(P0, 0)
    cp.begin(P0, 1)
    with cp.waiting_retry():
        assert cp.retry_waiting == 1
    assert cp.retry_waiting == 0
    cp.abandon(P0, 0)
    cp.abandon(P0, 0)  # twice: still counted once
    assert cp.inflight(P0) == 1
    assert await cp.wait_idle([P0], 0.02) is False
    assert await cp.wait_idle([P1], 0.0) is True
    cp.abandon(P0, 1)
    assert await cp.wait_idle(None, 0.0) is True


async def test_wait_idle_returns_once_in_flight_work_is_answered() -> None:
    producer = FakeProducer(hold=True)
    cp = make_checkpoint(FakeConsumer(), producer)
    cp.begin(P0, 0)
    task = asyncio.create_task(cp.answer(P0, record(0), result=result(0)))
    asyncio.get_running_loop().call_later(0.05, producer.acknowledge_all)
    assert await cp.wait_idle([P0], 2.0) is True
    await task


async def test_lag_is_the_high_watermark_minus_the_group_s_committed_offset() -> None:
    metrics = WorkerMetrics()
    # P0 was committed up to 2 by its previous owner; P1 has no high watermark yet.
    consumer = FakeConsumer(assigned={P0, P1}, high={P0: 10}, group={P0: 2})
    cp = make_checkpoint(consumer, FakeProducer(), metrics)
    lag = {"topic": P0.topic, "partition": "0"}
    await cp.update_lag()  # nothing committed by this process yet: the group's offset counts
    assert metrics.registry.get_sample_value("vf_consumer_lag", lag) == 8
    for offset in range(2, 6):
        cp.begin(P0, offset)
        await cp.answer(P0, record(offset), result=result(offset))
    await cp.commit()
    await cp.update_lag()  # this process's commit moves it at once, without asking the broker
    assert metrics.registry.get_sample_value("vf_consumer_lag", lag) == 4
    cp.forget([P0])
    assert metrics.registry.get_sample_value("vf_consumer_lag", lag) is None
    assert metrics.registry.get_sample_value("vf_partition_commit_stalled_seconds",
                                             lag) is None


async def test_a_burst_of_answers_makes_the_commit_due_before_its_interval() -> None:
    consumer, producer = FakeConsumer(), FakeProducer()
    cp = make_checkpoint(consumer, producer)
    for offset in range(COMMIT_BURST):
        cp.begin(P0, offset)
    for offset in range(COMMIT_BURST - 1):
        await cp.answer(P0, record(offset), result=result(offset))
    with pytest.raises(TimeoutError):  # one short of a burst: the interval decides
        async with asyncio.timeout(0.2):
            await cp.wait_due(60.0)
    await cp.answer(P0, record(COMMIT_BURST - 1), result=result(COMMIT_BURST - 1))
    async with asyncio.timeout(5):  # the burst is complete: due at once
        await cp.wait_due(60.0)
    assert await cp.commit() is True
    assert consumer.commits == [{P0: COMMIT_BURST}]
    with pytest.raises(TimeoutError):  # the commit took the burst along
        async with asyncio.timeout(0.2):
            await cp.wait_due(60.0)


async def test_with_no_burst_the_commit_is_due_after_its_interval() -> None:
    cp = make_checkpoint(FakeConsumer(), FakeProducer())
    started = asyncio.get_running_loop().time()
    await cp.wait_due(0.05)
    assert asyncio.get_running_loop().time() - started >= 0.045  # timer granularity
