"""The commit sequence of the synthesis worker, as numbered steps in one place.

Every record taken off `tts.requests` walks these steps; a step runs only once the one
before it succeeded, so a failure anywhere leaves the offset uncommitted and the record is
redelivered (to this worker or to the partition's next owner):

    0. begin(tp, offset)   the fetch loop took the record: its offset is pending and the
                           record counts as in flight on its partition
    1. object stored       the processor uploaded the audio before it returned the result
                           (a rejected or dead-lettered record has nothing to store)
    2. answer(...)         Publisher sends the result and/or DLQ record and waits for the
                           broker's acknowledgement (acks=all)
    3.   -> offset done    only after step 2 returned; a failed publish stops here
    4. commit()            every 0.5 s, or sooner once COMMIT_BURST answers wait for it
                           (and on revocation and shutdown): per partition, the
                           offset below which every fetched record is done, via
                           consumer.commit; a commit refused after a rebalance is left to
                           the new owner, a broker error is retried on the next round
    then update_lag()      LagMonitor (lag.py): lag of every assigned partition from the
                           group's committed offset, and partitions whose commits are stuck

A record leaves the in-flight count through step 3 or through abandon() (dropped from the
queue on revocation, given back at shutdown, or its publish failed); either way a
revocation waiting on the partition stops waiting for it, and an abandoned offset is never
committed. Revoked partitions take no new work and are excluded from the periodic commit;
forget() drops their offsets, after which late answers are ignored (OffsetTracker.done).
Quix Streams' `checkpointing/checkpoint.py` is the model.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Iterable, Iterator
from typing import Any

from aiokafka import ConsumerRecord, TopicPartition
from aiokafka.errors import CommitFailedError, IllegalStateError, KafkaError

from consumers.metrics import WorkerMetrics
from consumers.worker.lag import LagMonitor
from consumers.worker.offsets import OffsetTracker
from consumers.worker.publisher import Publisher
from topics.events import DeadLetter, SynthesisResult

log = logging.getLogger(__name__)
# Answers that wake the commit loop before its interval is up. Every answer not yet
# committed is answered again after a crash (the next owner redelivers it, and the store
# makes the second answer a duplicate event, not a second object); a burst of fast answers
# under load would otherwise leave a whole interval's worth of them exposed.
COMMIT_BURST = 32


class Checkpoint:
    """Pending offsets, in-flight records, revoked partitions, commits and lag of one worker.

    `consumer` needs commit(offsets), and for the lag what LagMonitor needs (an
    AIOKafkaConsumer); `publisher` sends and acknowledges answers. No Kafka call is made
    outside steps 2 and 4 and the lag report. `lag` is the LagMonitor (its stuck() is what
    /readyz lists).
    """

    def __init__(self, *, consumer: Any, publisher: Publisher, metrics: WorkerMetrics,
                 poll_s: float = 0.05, stuck_after_s: float = 120.0,
                 lag: LagMonitor | None = None) -> None:
        self._consumer = consumer
        self._publisher = publisher
        self._metrics = metrics
        self._poll_s = poll_s
        self.lag = lag or LagMonitor(consumer=consumer, metrics=metrics,
                                     stuck_after_s=stuck_after_s)
        self._offsets = OffsetTracker()
        # Offsets per partition that began and are neither done nor abandoned. Sets, not
        # counts: ending a record twice (a late task after a revocation) cannot go negative.
        self._inflight: dict[TopicPartition, set[int]] = {}
        self._revoked: set[TopicPartition] = set()
        self._retry_waiting = 0
        self.last_commit_ok = 0.0  # time.monotonic() of the last successful commit
        self.answered = 0
        self._since_commit = 0  # offsets done since the last commit began
        self._burst = asyncio.Event()  # set once COMMIT_BURST of them wait

    # -- step 0: the fetch loop took a record ---------------------------------------------

    def begin(self, tp: TopicPartition, offset: int) -> bool:
        """Track a fetched record; False for a duplicate (a refetch of a record already in
        flight or already answered), which must not be processed again."""
        if not self._offsets.add(tp, offset):
            return False
        self._inflight.setdefault(tp, set()).add(offset)
        return True

    def resume_offset(self, tp: TopicPartition) -> int | None:
        """One past the last record of `tp` taken since it was assigned (None: none yet)."""
        return self._offsets.next_fetch(tp)

    def owns(self, tp: TopicPartition) -> bool:
        """False once `tp` is revoked (until it is assigned again): start no work for it."""
        return tp not in self._revoked

    def inflight(self, tp: TopicPartition) -> int:
        return len(self._inflight.get(tp, ()))

    @property
    def retry_waiting(self) -> int:
        """Records waiting out a retry backoff; the fetch loop counts them as queued."""
        return self._retry_waiting

    @contextlib.contextmanager
    def waiting_retry(self) -> Iterator[None]:
        self._retry_waiting += 1
        try:
            yield
        finally:
            self._retry_waiting -= 1

    def abandon(self, tp: TopicPartition, offset: int) -> None:
        """The record leaves this worker unanswered: it stays pending (never committed), so
        the partition's next owner, or the next start, redelivers it."""
        self._end(tp, offset)

    def forwarded(self, tp: TopicPartition, offset: int) -> None:
        """The record's copy is on another worker's shard partition, acknowledged (spill.py):
        its offset is done without an answer from here."""
        self._offsets.done(tp, offset)
        self._end(tp, offset)
        self._count_done()

    # -- steps 2 and 3: answer, then mark done ---------------------------------------------

    async def answer(self, tp: TopicPartition, rec: ConsumerRecord[bytes, bytes], *,
                     result: SynthesisResult | None = None,
                     dlq: DeadLetter | None = None) -> None:
        """Step 2 (publish and wait for the acknowledgement), then step 3 (offset done).

        If the publish raises or is cancelled the offset is abandoned, not done, and the
        error propagates: nothing after step 2 happens for this record.
        """
        try:
            await self._publisher.publish(rec, result=result, dlq=dlq)  # step 2
        except BaseException:
            self.abandon(tp, rec.offset)
            raise
        # Step 3. Also while a revocation waits for in-flight work (its commit needs this);
        # a no-op once the partition is forgotten.
        self._offsets.done(tp, rec.offset)
        self._end(tp, rec.offset)
        self.answered += 1
        self._count_done()

    def _count_done(self) -> None:
        self._since_commit += 1
        if self._since_commit >= COMMIT_BURST:
            self._burst.set()

    # -- step 4: commit ----------------------------------------------------------------------

    async def wait_due(self, interval_s: float) -> None:
        """Return when the next commit is due: `interval_s` passed, or COMMIT_BURST offsets
        were done since the last commit began, whichever comes first."""
        with contextlib.suppress(TimeoutError):
            # asyncio.timeout, not wait_for: see lag.py's refresh (the drain cancels this).
            async with asyncio.timeout(interval_s):
                await self._burst.wait()

    async def commit(self, only: Iterable[TopicPartition] | None = None) -> bool:
        """Commit the contiguous done offsets of the owned partitions (or of `only`, which a
        revocation uses for the partitions it is giving away). True when a commit was made."""
        candidates = self._offsets.committable()
        if only is not None:
            keep = set(only)
            offsets = {tp: off for tp, off in candidates.items() if tp in keep}
        else:
            offsets = {tp: off for tp, off in candidates.items() if tp not in self._revoked}
            self._since_commit = 0  # what is done from here on waits for the next round
            self._burst.clear()
        if not offsets:
            return False
        try:
            await self._consumer.commit(offsets)
        except (CommitFailedError, IllegalStateError) as exc:
            # The group moved on: the new owner redelivers these and answers them from the store.
            log.warning("commit of %d partitions failed after a rebalance: %s", len(offsets), exc)
            return False
        except KafkaError as exc:
            log.warning("commit failed (%s); will retry", exc)
            return False
        self.last_commit_ok = time.monotonic()
        self._offsets.mark_committed(offsets)
        self.lag.committed(offsets)
        self._metrics.on_commit()
        return True

    async def update_lag(self) -> None:
        """Lag and commit stalls of every owned assigned partition, whoever committed it
        (lag.py); revoked partitions are left to their new owner. It runs in the commit
        loop: a fault in the report is logged, and the next round commits all the same."""
        try:
            await self.lag.update(owned=self.owns)
        except Exception:
            log.exception("lag report failed; commits go on")

    # -- partitions changing hands ---------------------------------------------------------

    def revoke(self, tps: Iterable[TopicPartition]) -> None:
        self._revoked.update(tps)

    def assign(self, tps: Iterable[TopicPartition]) -> None:
        self._revoked.difference_update(tps)

    async def wait_idle(self, tps: Iterable[TopicPartition] | None, timeout_s: float) -> bool:
        """Wait until nothing is in flight on `tps` (None: on any partition), at most
        `timeout_s`; False when work was still in flight at the deadline."""
        watched = None if tps is None else set(tps)
        deadline = time.monotonic() + timeout_s
        while True:
            busy = self._inflight if watched is None else [tp for tp in watched
                                                           if self._inflight.get(tp)]
            if not busy:
                return True
            if time.monotonic() >= deadline:
                return False
            await asyncio.sleep(self._poll_s)

    def forget(self, tps: Iterable[TopicPartition]) -> None:
        """Drop the partitions' offsets and lag series; what is unfinished goes to the next
        owner, and answers that finish later change nothing here."""
        tps = set(tps)
        self._offsets.forget(tps)
        for tp in tps:
            self._inflight.pop(tp, None)
        self.lag.forget(tps)

    def _end(self, tp: TopicPartition, offset: int) -> None:
        offsets = self._inflight.get(tp)
        if offsets is None:
            return
        offsets.discard(offset)
        if not offsets:
            del self._inflight[tp]
