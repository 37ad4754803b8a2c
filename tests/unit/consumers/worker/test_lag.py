"""LagMonitor: lag from the group's committed offsets, and the stuck-commit clock.

The consumer is the fake of tests/unit/consumers/worker/fakes.py (committed offsets, log
start and end, a counter of broker reads); time is a settable clock.
"""

from __future__ import annotations

import logging

import pytest
from aiokafka import TopicPartition
from aiokafka.errors import KafkaConnectionError

from consumers.metrics import WorkerMetrics
from consumers.worker.lag import LagMonitor
from tests.unit.consumers.worker.fakes import P0, P1, FakeConsumer, FakeProducer, make_checkpoint

P3 = TopicPartition(P0.topic, 3)


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def make(consumer: FakeConsumer, *, stuck_after_s: float = 120.0, refresh_s: float = 30.0,
         ) -> tuple[LagMonitor, WorkerMetrics, Clock]:
    metrics, clock = WorkerMetrics(), Clock()
    monitor = LagMonitor(consumer=consumer, metrics=metrics, stuck_after_s=stuck_after_s,
                         refresh_s=refresh_s, refresh_timeout_s=0.05, clock=clock)
    return monitor, metrics, clock


def sample(metrics: WorkerMetrics, name: str, tp: TopicPartition | None = None) -> float | None:
    labels = {} if tp is None else {"topic": tp.topic, "partition": str(tp.partition)}
    return metrics.registry.get_sample_value(name, labels)


def lag(metrics: WorkerMetrics, tp: TopicPartition) -> float | None:
    return sample(metrics, "vf_consumer_lag", tp)


def stall(metrics: WorkerMetrics, tp: TopicPartition) -> float | None:
    return sample(metrics, "vf_partition_commit_stalled_seconds", tp)


async def test_every_assigned_partition_has_lag_whoever_committed_it() -> None:
    # P0: committed by the group (another process, earlier); P1: never committed, so from
    # the start of the log (retention moved it to 4), P3: not fetched yet, so its end offset.
    consumer = FakeConsumer(assigned={P0, P1, P3}, high={P0: 10, P1: 9}, group={P0: 7, P3: 1},
                            start={P1: 4}, end={P3: 6})
    monitor, metrics, _ = make(consumer)
    await monitor.update()
    assert (lag(metrics, P0), lag(metrics, P1), lag(metrics, P3)) == (3, 5, 5)
    assert consumer.reads == 3 + 1 + 1  # committed x3, one beginning_offsets, one end_offsets


async def test_the_broker_is_read_at_the_refresh_interval_not_every_round() -> None:
    consumer = FakeConsumer(assigned={P0}, high={P0: 10}, group={P0: 7})
    monitor, metrics, clock = make(consumer, refresh_s=30.0)
    await monitor.update()
    reads = consumer.reads
    for _ in range(10):  # 5 s of commit rounds
        clock.now += 0.5
        consumer.high[P0] += 1
        await monitor.update()
    assert consumer.reads == reads
    assert lag(metrics, P0) == 13  # the end moves with every fetch, without asking
    monitor.committed({P0: 15})  # this process's commit: known without asking either
    await monitor.update()
    assert lag(metrics, P0) == 5
    clock.now += 30.0
    await monitor.update()
    assert consumer.reads == reads + 1


async def test_a_newly_assigned_partition_is_read_at_once() -> None:
    consumer = FakeConsumer(assigned={P0}, high={P0: 10, P1: 10}, group={P0: 7, P1: 2})
    monitor, metrics, clock = make(consumer)
    await monitor.update()
    consumer.assigned.add(P1)
    clock.now += 1.0
    await monitor.update()
    assert lag(metrics, P1) == 8


async def test_a_refresh_that_raced_a_commit_does_not_move_the_base_back() -> None:
    consumer = FakeConsumer(assigned={P0}, high={P0: 10}, group={P0: 3})
    monitor, metrics, _ = make(consumer)
    monitor.committed({P0: 8})  # acknowledged before the (older) read below comes back
    await monitor.update()
    assert lag(metrics, P0) == 2


async def test_a_partition_whose_commits_stand_still_while_records_wait_is_stuck(
        caplog: pytest.LogCaptureFixture) -> None:
    consumer = FakeConsumer(assigned={P0, P1}, high={P0: 10, P1: 10}, group={P0: 3, P1: 3})
    monitor, metrics, clock = make(consumer, stuck_after_s=120.0)
    await monitor.update()
    assert stall(metrics, P0) == 0
    for step in range(1, 5):  # P1's commits move every 30 s, P0's never
        clock.now += 30.0
        consumer.high[P0] += 1
        consumer.high[P1] += 1
        monitor.committed({P1: 3 + step})
        await monitor.update()
    assert stall(metrics, P0) == 120.0 and stall(metrics, P1) == 0
    assert monitor.stuck() == [] and sample(metrics, "vf_partitions_stuck") == 0  # not past
    clock.now += 1.0
    with caplog.at_level(logging.WARNING, logger="consumers.worker.lag"):
        await monitor.update()
        clock.now += 0.5
        await monitor.update()  # still stuck: not logged again
    [stuck] = monitor.stuck()
    assert stuck.as_dict() == {"topic": P0.topic, "partition": 0, "committed": 3, "lag": 11,
                               "stalled_s": 121.5}
    assert sample(metrics, "vf_partitions_stuck") == 1
    assert caplog.text.count("stuck: committed offset 3 has not moved for 121 s") == 1
    monitor.committed({P0: 4})  # the record is answered at last
    clock.now += 0.5
    await monitor.update()
    assert monitor.stuck() == [] and sample(metrics, "vf_partitions_stuck") == 0
    assert stall(metrics, P0) == 0


async def test_an_idle_partition_that_gets_a_record_is_not_stalled_since_its_last_commit(
        ) -> None:
    consumer = FakeConsumer(assigned={P0}, high={P0: 5}, group={P0: 5})
    monitor, metrics, clock = make(consumer, stuck_after_s=120.0)
    await monitor.update()
    clock.now += 3600.0  # an hour with nothing to do
    await monitor.update()
    assert stall(metrics, P0) == 0
    consumer.high[P0] = 6  # one new record
    clock.now += 0.5
    await monitor.update()
    # The clock runs from the last round that saw nothing waiting, not from an hour ago.
    assert stall(metrics, P0) == 0.5
    clock.now += 2.0
    await monitor.update()
    assert stall(metrics, P0) == 2.5 and monitor.stuck() == []


async def test_a_partition_gone_from_the_assignment_or_revoked_loses_its_series() -> None:
    consumer = FakeConsumer(assigned={P0, P1}, high={P0: 10, P1: 10}, group={P0: 1, P1: 1})
    monitor, metrics, clock = make(consumer, stuck_after_s=1.0)
    await monitor.update()
    clock.now += 2.0
    await monitor.update()
    assert len(monitor.stuck()) == 2
    consumer.assigned.discard(P1)  # moved to another worker
    await monitor.update(owned=lambda tp: tp != P0)  # P0 revoked, the listener still running
    assert lag(metrics, P0) is None and lag(metrics, P1) is None
    assert stall(metrics, P0) is None and stall(metrics, P1) is None
    assert monitor.stuck() == [] and sample(metrics, "vf_partitions_stuck") == 0


@pytest.mark.parametrize("trouble", ["error", "hang"])
async def test_a_broker_that_cannot_be_read_costs_one_bounded_try_per_retry_interval(
        trouble: str, caplog: pytest.LogCaptureFixture) -> None:
    consumer = FakeConsumer(assigned={P0}, high={P0: 10}, group={P0: 7})
    monitor, metrics, clock = make(consumer, refresh_s=30.0)
    await monitor.update()
    assert lag(metrics, P0) == 3
    consumer.read_error = KafkaConnectionError() if trouble == "error" else None
    consumer.hang = trouble == "hang"
    clock.now += 30.0
    with caplog.at_level(logging.WARNING, logger="consumers.worker.lag"):
        await monitor.update()  # waits at most refresh_timeout_s (50 ms here)
    assert "lag uses the last known ones" in caplog.text
    assert lag(metrics, P0) == 3  # from what was known
    reads = consumer.reads
    clock.now += 1.0
    await monitor.update()  # not retried every round
    assert consumer.reads == reads
    consumer.read_error, consumer.hang = None, False
    consumer.group[P0] = 9
    clock.now += 5.0
    await monitor.update()
    assert lag(metrics, P0) == 1


class RebalancingConsumer(FakeConsumer):
    """P1 is revoked while the group's offsets are being read; highwater() asserts, as
    aiokafka's does, that the partition is still assigned."""

    def highwater(self, tp: TopicPartition) -> int | None:
        assert tp in self.assigned, "Partition is not assigned"
        return super().highwater(tp)

    async def committed(self, tp: TopicPartition) -> int | None:
        self.assigned.discard(P1)
        return await super().committed(tp)


async def test_a_rebalance_during_the_refresh_reports_only_what_is_still_assigned() -> None:
    consumer = RebalancingConsumer(assigned={P0, P1}, high={P0: 10, P1: 10},
                                   group={P0: 7, P1: 7})
    monitor, metrics, _ = make(consumer)
    await monitor.update()
    assert lag(metrics, P0) == 3
    assert lag(metrics, P1) is None


async def test_a_failing_lag_report_does_not_stop_the_commit_loop(
        caplog: pytest.LogCaptureFixture) -> None:
    class Broken(FakeConsumer):
        def assignment(self) -> set[TopicPartition]:
            raise RuntimeError("bug in the report")

    consumer = Broken()
    cp = make_checkpoint(consumer, FakeProducer())
    with caplog.at_level(logging.ERROR, logger="consumers.worker.checkpoint"):
        await cp.update_lag()  # logged, not raised
    assert "lag report failed; commits go on" in caplog.text
