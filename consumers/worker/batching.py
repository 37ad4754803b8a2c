"""The worker's local queue: requests grouped by voice, released as micro-batches.

fetch loop: put(voice_id, item) appends to that voice's lane (never blocks, never drops; the
fetch loop reads `full` and pauses its partitions) -> dispatchers: await next_batch() ->
(voice_id, up to `max_batch` items of that one voice) -> the engine.

A lane is ready once it holds `max_batch` items or its oldest item has waited
`batch_wait_s` (with max_batch=1 every item is ready at once), or at once while `idle()` says
the engine has a free slot: waiting for company only pays when the device is busy, and a
lone request on an idle worker would otherwise wait out the window for nothing. Among ready
lanes the one whose oldest item is oldest goes first, so a hot voice with always-full lanes
cannot starve a quiet one for longer than `batch_wait_s` plus one batch. On revocation,
drop(predicate) takes back the waiting items of revoked partitions. close() starts the
drain: what is queued is still handed out (partial batches at once), then next_batch raises
`BatcherClosed`.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import math
import time
from collections import deque
from collections.abc import Callable
from typing import Generic, NamedTuple, TypeVar

T = TypeVar("T")


class BatcherClosed(Exception):
    """The batcher was closed and everything queued has been handed out."""


class _Entry(NamedTuple, Generic[T]):
    seq: int  # global arrival order, so drop() can return items in the order they came
    enqueued_at: float  # time.monotonic()
    item: T


class VoiceBatcher(Generic[T]):
    def __init__(self, *, max_batch: int, batch_wait_s: float, capacity: int,
                 idle: Callable[[], bool] | None = None) -> None:
        if isinstance(max_batch, bool) or not isinstance(max_batch, int) or max_batch < 1:
            raise ValueError(f"max_batch must be an integer >= 1, got {max_batch!r}")
        if not math.isfinite(batch_wait_s) or batch_wait_s < 0:
            raise ValueError(f"batch_wait_s must be a finite number >= 0, got {batch_wait_s!r}")
        if isinstance(capacity, bool) or not isinstance(capacity, int) or capacity < 1:
            raise ValueError(f"capacity must be an integer >= 1, got {capacity!r}")
        self.max_batch = max_batch
        self.batch_wait_s = batch_wait_s
        self.capacity = capacity
        self._idle = idle or (lambda: False)
        self._lanes: dict[str, deque[_Entry[T]]] = {}
        self._size = 0
        self._seq = itertools.count()
        self._changed = asyncio.Event()  # set on put/close; waiters re-check the lanes
        self._closed = False

    def put(self, voice_id: str, item: T) -> None:
        """Queue `item` for `voice_id`; never blocks and never drops, even past `capacity`.

        Accepted after close() as well (a retry that raced the drain): it is handed out
        before `BatcherClosed` as long as a dispatcher is still asking.
        """
        lane = self._lanes.get(voice_id)
        if lane is None:
            lane = self._lanes[voice_id] = deque()
        lane.append(_Entry(next(self._seq), time.monotonic(), item))
        self._size += 1
        self._changed.set()

    def qsize(self) -> int:
        return self._size

    @property
    def full(self) -> bool:
        return self._size >= self.capacity

    def close(self) -> None:
        self._closed = True
        self._changed.set()

    def drop(self, predicate: Callable[[T], bool]) -> list[T]:
        """Remove and return the waiting items that match, in the order they were put."""
        dropped: list[_Entry[T]] = []
        for voice in list(self._lanes):
            kept: deque[_Entry[T]] = deque()
            for entry in self._lanes[voice]:
                (dropped if predicate(entry.item) else kept).append(entry)
            if kept:
                self._lanes[voice] = kept
            else:
                del self._lanes[voice]
        self._size -= len(dropped)
        dropped.sort(key=lambda entry: entry.seq)
        return [entry.item for entry in dropped]

    async def next_batch(self) -> tuple[str, list[T]]:
        """Wait for the next ready lane and take up to `max_batch` items from it.

        Raises `BatcherClosed` once closed and empty; cancelling a wait loses nothing.
        """
        while True:
            voice, wait_s = self._pick(time.monotonic())
            if voice is not None:
                return voice, self._take(voice)
            if self._closed:
                raise BatcherClosed("batcher closed and drained")
            # No await between the check above and clear(): a put cannot slip in between.
            self._changed.clear()
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(wait_s):
                    await self._changed.wait()

    def _pick(self, now: float) -> tuple[str | None, float | None]:
        """The ready lane with the oldest head, else the seconds until the first one is ready
        (None: nothing queued). O(number of voices waiting), bounded by the queue size."""
        best: str | None = None
        best_t = math.inf
        next_ready = math.inf
        # Closing: nothing more will join a partial batch, so hand it out now.
        release_all = self._closed or (bool(self._lanes) and self._idle())
        for voice, lane in self._lanes.items():
            head_t = lane[0].enqueued_at
            due = head_t + self.batch_wait_s
            if len(lane) >= self.max_batch or due <= now or release_all:
                if head_t < best_t:
                    best, best_t = voice, head_t
            elif due < next_ready:
                next_ready = due
        if best is not None:
            return best, None
        return None, (None if next_ready == math.inf else next_ready - now)

    def _take(self, voice: str) -> list[T]:
        lane = self._lanes[voice]
        batch = [lane.popleft().item for _ in range(min(self.max_batch, len(lane)))]
        if not lane:
            del self._lanes[voice]
        self._size -= len(batch)
        return batch
