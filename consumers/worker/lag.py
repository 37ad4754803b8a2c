"""Lag and stuck commits per assigned partition, from the group's committed offsets.

    commit loop, every 0.5 s or after a burst of answers (loop.py -> Checkpoint.update_lag):
        Checkpoint.commit succeeded -> committed(offsets): this process's own commits
        -> await update():
            refresh, when a partition is new to this process and every `refresh_s` (30 s):
                the group's committed offset of each assigned partition (consumer.committed,
                whoever committed it) and, for those the group never committed, the start of
                the log (consumer.beginning_offsets: where `auto_offset_reset=earliest`
                begins), plus the end offset of partitions not fetched yet; bounded by
                `refresh_timeout_s`, a failure keeps what was known and tries again later
            per assigned partition:
                base = the group's committed offset, else the start of the log
                end  = consumer.highwater(tp) (from the last fetch), else the refreshed end
                lag  = end - base                              -> vf_consumer_lag
                stall: how long `base` has not moved while lag > 0
                                                 -> vf_partition_commit_stalled_seconds
                stall > stuck_after_s: stuck     -> vf_partitions_stuck, stuck() (/readyz)
    revocation (Checkpoint.forget), or a partition gone from the assignment: its state and
    series are dropped, so the new owner's series are not counted twice.

Only the partition's owner commits it, so between refreshes the group's committed offset is
what was read plus this process's own commits (the larger of the two wins: a refresh that
raced a commit cannot move the base back). The stall clock is this process's: it starts
when the partition is first seen with records waiting, and restarts whenever the base moves
or the lag is 0, so an idle partition that gets one new record is not "stalled" since the
last commit hours ago. A partition that moves to another worker starts a new clock there.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from aiokafka import TopicPartition
from aiokafka.errors import KafkaError

from consumers.metrics import WorkerMetrics

log = logging.getLogger(__name__)

REFRESH_S = 30.0  # how often the group's committed offsets are read back from the broker
REFRESH_TIMEOUT_S = 2.0  # the commit loop waits at most this long for a refresh
RETRY_S = 5.0  # after a failed refresh, the next try
MIN_GAP_S = 1.0  # between two refreshes, even for newly assigned partitions


@dataclass(frozen=True)
class StuckPartition:
    """A partition whose committed offset stood still past the bound while records waited."""

    topic: str
    partition: int
    committed: int  # the offset the group resumes from (the start of the log if none)
    lag: int
    stalled_s: float

    def as_dict(self) -> dict[str, object]:
        return {"topic": self.topic, "partition": self.partition, "committed": self.committed,
                "lag": self.lag, "stalled_s": round(self.stalled_s, 1)}


class _Partition:
    """What is known of one assigned partition, and its stall clock."""

    __slots__ = ("base", "end", "lag", "seen_base", "since")

    def __init__(self) -> None:
        self.base: int | None = None  # the group's committed offset, else the log's start
        self.end: int | None = None  # end offset from the last refresh (before any fetch)
        self.lag = 0
        self.seen_base: int | None = None  # base at the last observation
        self.since = 0.0  # when the stall clock last restarted

    def raise_base(self, offset: int) -> None:
        if self.base is None or offset > self.base:
            self.base = offset

    def observe(self, end: int, now: float) -> float:
        """Lag against `end`, and seconds the base has stood still while lag > 0."""
        assert self.base is not None
        self.lag = max(0, end - self.base)
        if self.lag == 0 or self.base != self.seen_base:
            self.seen_base, self.since = self.base, now
        return now - self.since


class LagMonitor:
    """Per assigned partition: lag from the group's committed offset, and commit stalls.

    `consumer` needs assignment(), highwater(tp), committed(tp), beginning_offsets(tps) and
    end_offsets(tps) (an AIOKafkaConsumer). `clock` is injectable for tests.
    """

    def __init__(self, *, consumer: Any, metrics: WorkerMetrics, stuck_after_s: float,
                 refresh_s: float = REFRESH_S, refresh_timeout_s: float = REFRESH_TIMEOUT_S,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._consumer = consumer
        self._metrics = metrics
        self.stuck_after_s = stuck_after_s
        self._refresh_s = refresh_s
        self._refresh_timeout_s = refresh_timeout_s
        self._clock = clock
        self._parts: dict[TopicPartition, _Partition] = {}
        self._next_refresh = 0.0  # the periodic refresh
        self._retry_at = 0.0  # no refresh at all before this (after a failure, or just done)
        self._stuck: list[StuckPartition] = []

    def committed(self, offsets: Mapping[TopicPartition, int]) -> None:
        """This process committed `offsets` (acknowledged by the broker)."""
        for tp, offset in offsets.items():
            self._parts.setdefault(tp, _Partition()).raise_base(offset)

    def forget(self, tps: Iterable[TopicPartition]) -> None:
        """Drop revoked partitions and their series; their new owner reports them."""
        for tp in tps:
            self._parts.pop(tp, None)
            self._metrics.clear_lag(tp.topic, tp.partition)
        self._stuck = [s for s in self._stuck if TopicPartition(s.topic, s.partition)
                       in self._parts]

    def stuck(self) -> list[StuckPartition]:
        """The partitions found stuck by the last update(), longest stalled first."""
        return list(self._stuck)

    async def update(self, owned: Callable[[TopicPartition], bool] = lambda tp: True) -> None:
        """Refresh if due, then set lag and stall of every assigned partition `owned`."""
        assigned = {tp for tp in self._consumer.assignment() if owned(tp)}
        self.forget([tp for tp in self._parts if tp not in assigned])
        now = self._clock()
        unknown = any(tp not in self._parts or self._parts[tp].base is None
                      for tp in assigned)
        if assigned and now >= self._retry_at and (now >= self._next_refresh or unknown):
            await self._refresh(assigned, now)
            # A rebalance may have run meanwhile: highwater() asserts the partition is ours.
            assigned &= self._consumer.assignment()
        stuck: list[StuckPartition] = []
        for tp in assigned:
            part = self._parts.get(tp)
            high = self._consumer.highwater(tp)
            end = high if high is not None else (part.end if part else None)
            if part is None or part.base is None or end is None:
                continue  # unknown until the refresh answers or the first fetch
            stalled = part.observe(end, now)
            self._metrics.set_lag(tp.topic, tp.partition, part.lag)
            self._metrics.set_commit_stall(tp.topic, tp.partition, stalled)
            if stalled > self.stuck_after_s:
                stuck.append(StuckPartition(tp.topic, tp.partition, part.base, part.lag,
                                            stalled))
        stuck.sort(key=lambda s: (-s.stalled_s, s.topic, s.partition))
        self._metrics.set_partitions_stuck(len(stuck))
        before = {(s.topic, s.partition) for s in self._stuck}
        for s in stuck:
            if (s.topic, s.partition) not in before:  # once, when it becomes stuck
                log.warning("partition %s-%d stuck: committed offset %d has not moved for "
                            "%.0f s while %d records wait", s.topic, s.partition, s.committed,
                            s.stalled_s, s.lag, extra={"topic": s.topic,
                                                       "partition": s.partition,
                                                       "offset": s.committed})
        self._stuck = stuck

    async def _refresh(self, tps: set[TopicPartition], now: float) -> None:
        try:
            # asyncio.timeout, not wait_for: on Python 3.11 wait_for can swallow the drain's
            # cancel of the commit loop that runs this (see worker/fleet.py).
            async with asyncio.timeout(self._refresh_timeout_s):
                await self._read_group(sorted(tps))
        except (KafkaError, TimeoutError) as exc:
            # Lag goes on from what is known; the next try comes after RETRY_S, not at once,
            # so a broker outage does not slow every commit round by the timeout.
            log.warning("reading the group's committed offsets failed (%s); lag uses the "
                        "last known ones", exc or type(exc).__name__)
            self._retry_at = now + min(RETRY_S, self._refresh_s)
            return
        self._next_refresh = now + self._refresh_s
        self._retry_at = now + min(MIN_GAP_S, self._refresh_s)  # a partition the broker
        # could not place (no start offset) is not asked for again every round

    async def _read_group(self, tps: list[TopicPartition]) -> None:
        consumer = self._consumer
        # highwater() asserts the partition is assigned; a rebalance may have run since
        # update() looked (wait_for runs this as a task of its own).
        ours = consumer.assignment()
        unfetched = [tp for tp in tps if tp in ours and consumer.highwater(tp) is None]
        committed = await asyncio.gather(*(consumer.committed(tp) for tp in tps))
        never = [tp for tp, offset in zip(tps, committed, strict=True) if offset is None]
        starts = await consumer.beginning_offsets(never) if never else {}
        ends = await consumer.end_offsets(unfetched) if unfetched else {}
        for tp, offset in zip(tps, committed, strict=True):
            part = self._parts.setdefault(tp, _Partition())
            base = offset if offset is not None else starts.get(tp)
            if base is not None:
                part.raise_base(base)
            if tp in ends:
                part.end = ends[tp]
