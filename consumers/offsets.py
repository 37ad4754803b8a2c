"""Per-partition commit points from out-of-order completions.

add(tp, offset) when a record is fetched -> done(tp, offset) when its answer is acknowledged
-> committable(): for each partition, one past the highest offset below which every fetched
record is done. Offsets may have gaps (compaction, transaction markers): only fetched
offsets count. Each partition keeps a min-heap of outstanding offsets, so every operation is
O(log n).
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable
from dataclasses import dataclass, field

from aiokafka.structs import TopicPartition


@dataclass
class _Partition:
    outstanding: list[int] = field(default_factory=list)  # heap of fetched, not done
    finished: set[int] = field(default_factory=set)  # done, but below an outstanding one?
    highest_fetched: int = -1
    committed: int | None = None

    def commit_point(self) -> int | None:
        # Lazily pop offsets that completed.
        while self.outstanding and self.outstanding[0] in self.finished:
            self.finished.discard(heapq.heappop(self.outstanding))
        if self.outstanding:
            point = self.outstanding[0]  # everything fetched below it is done
        elif self.highest_fetched >= 0:
            point = self.highest_fetched + 1
        else:
            return None
        return point


class OffsetTracker:
    def __init__(self) -> None:
        self._parts: dict[TopicPartition, _Partition] = {}

    def add(self, tp: TopicPartition, offset: int) -> None:
        part = self._parts.setdefault(tp, _Partition())
        if offset <= part.highest_fetched:
            return  # a re-fetch after a seek: already tracked
        part.highest_fetched = offset
        heapq.heappush(part.outstanding, offset)

    def done(self, tp: TopicPartition, offset: int) -> None:
        part = self._parts.get(tp)
        if part is None or offset > part.highest_fetched:
            return  # forgotten partition (revoked) or a stale answer: nothing to track
        part.finished.add(offset)

    def committable(self) -> dict[TopicPartition, int]:
        out: dict[TopicPartition, int] = {}
        for tp, part in self._parts.items():
            point = part.commit_point()
            if point is not None and (part.committed is None or point > part.committed):
                out[tp] = point
        return out

    def mark_committed(self, offsets: dict[TopicPartition, int]) -> None:
        for tp, offset in offsets.items():
            part = self._parts.get(tp)
            if part is not None and (part.committed is None or offset > part.committed):
                part.committed = offset

    def pending(self, tp: TopicPartition) -> int:
        part = self._parts.get(tp)
        if part is None:
            return 0
        part.commit_point()
        return len(part.outstanding) - len(part.finished & set(part.outstanding))

    def total_pending(self) -> int:
        return sum(self.pending(tp) for tp in self._parts)

    def forget(self, tps: Iterable[TopicPartition]) -> None:
        for tp in tps:
            self._parts.pop(tp, None)

    def partitions(self) -> set[TopicPartition]:
        return set(self._parts)
