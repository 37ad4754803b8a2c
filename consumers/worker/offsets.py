"""Per-partition commit points from out-of-order completions (DESIGN.md "The synthesis worker").

fetch loop: add(tp, offset) for every record taken off the broker -> dispatchers finish
records in any order: done(tp, offset) once the answer is produced and flushed -> commit
loop: committable() gives, per partition whose point moved, one past the highest offset
below which every *fetched* offset is done -> consumer.commit(...) -> mark_committed(...).
On revocation, forget(tps) drops a partition's state; answers that finish later are ignored.

Offsets within a partition may have gaps (compaction, transaction markers), so the tracker
never assumes offset + 1 follows offset: only offsets that were added count. Each partition
keeps a min-heap of the offsets not yet passed by its commit point, so add and done are
O(log n) and the commit point advances in amortised O(1) per completed offset.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable, Mapping

from aiokafka.structs import TopicPartition


class _Partition:
    """Outstanding offsets of one partition and how far its commit point has advanced."""

    __slots__ = ("committed", "done", "fetched", "heap", "next_fetch", "position")

    def __init__(self) -> None:
        self.heap: list[int] = []  # fetched offsets the commit point has not passed, min first
        self.fetched: set[int] = set()  # the same offsets, for O(1) membership
        self.done: set[int] = set()  # those of them that are finished
        self.position: int | None = None  # next offset to commit; None until one is done
        self.committed: int | None = None  # the last position handed to mark_committed
        self.next_fetch = 0  # one past the highest offset ever added

    def add(self, offset: int) -> bool:
        if offset in self.fetched or (self.position is not None and offset < self.position):
            return False  # redelivered after a seek or a retried fetch: already accounted for
        self.next_fetch = max(self.next_fetch, offset + 1)
        heapq.heappush(self.heap, offset)
        self.fetched.add(offset)
        return True

    def finish(self, offset: int) -> bool:
        if offset not in self.fetched or offset in self.done:
            return False
        self.done.add(offset)
        heap = self.heap
        # Only the smallest outstanding offset can hold the commit point back.
        while heap and heap[0] in self.done:
            passed = heapq.heappop(heap)
            self.fetched.remove(passed)
            self.done.remove(passed)
            self.position = passed + 1
        return True


class OffsetTracker:
    """Which offsets are safe to commit, per partition; pure bookkeeping, no Kafka I/O."""

    def __init__(self) -> None:
        self._parts: dict[TopicPartition, _Partition] = {}

    def add(self, tp: TopicPartition, offset: int) -> bool:
        """Record a fetched offset; False when it was already tracked or already passed."""
        if offset < 0:
            raise ValueError(f"offset must be >= 0, got {offset} for {tp}")
        part = self._parts.get(tp)
        if part is None:
            part = self._parts[tp] = _Partition()
        return part.add(offset)

    def done(self, tp: TopicPartition, offset: int) -> bool:
        """Record that a fetched offset is finished.

        False (and nothing changes) when the partition was forgotten, the offset was never
        fetched, or it was already done: a late answer after a revocation is not an error.
        """
        part = self._parts.get(tp)
        return part is not None and part.finish(offset)

    def committable(self) -> dict[TopicPartition, int]:
        """Offsets to commit for the partitions whose point moved since `mark_committed`."""
        out: dict[TopicPartition, int] = {}
        for tp, part in self._parts.items():
            if part.position is not None and (part.committed is None
                                              or part.position > part.committed):
                out[tp] = part.position
        return out

    def mark_committed(self, offsets: Mapping[TopicPartition, int]) -> None:
        """Note a successful commit; offsets of forgotten partitions are ignored."""
        for tp, offset in offsets.items():
            part = self._parts.get(tp)
            if part is not None and (part.committed is None or offset > part.committed):
                part.committed = offset

    def committed(self, tp: TopicPartition) -> int | None:
        """The last offset `mark_committed` recorded for `tp` (None if none, or forgotten)."""
        part = self._parts.get(tp)
        return None if part is None else part.committed

    def next_fetch(self, tp: TopicPartition) -> int | None:
        """One past the highest offset added for `tp` since it was (re)assigned; None if none:
        where its fetching must resume so that no record is skipped."""
        part = self._parts.get(tp)
        return None if part is None or not part.next_fetch else part.next_fetch

    def forget(self, tps: Iterable[TopicPartition]) -> None:
        """Drop the state of revoked partitions; their unfinished offsets go to the next owner."""
        for tp in tps:
            self._parts.pop(tp, None)
