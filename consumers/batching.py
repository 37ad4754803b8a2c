"""The worker's bounded local queue, grouped by voice, released in micro-batches.

put(voice, item) appends to that voice's lane (never blocks, never drops; the fetch loop
pauses partitions when `full`) -> next_batch() waits until some lane holds `max_batch`
items or its oldest item has waited `batch_wait_s`, then hands out up to `max_batch` items
of that one voice. Among ready lanes the one whose head is oldest goes first, so a hot
voice cannot starve the others.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import OrderedDict, deque
from collections.abc import Callable
from typing import Generic, TypeVar

T = TypeVar("T")


class BatcherClosed(Exception):
    """The batcher was closed and everything queued has been handed out."""


class VoiceBatcher(Generic[T]):
    def __init__(self, *, max_batch: int, batch_wait_s: float, capacity: int) -> None:
        if max_batch < 1:
            raise ValueError(f"max_batch must be >= 1, got {max_batch}")
        if batch_wait_s < 0:
            raise ValueError(f"batch_wait_s must be >= 0, got {batch_wait_s}")
        if capacity < 1:
            raise ValueError(f"capacity must be >= 1, got {capacity}")
        self._max_batch = max_batch
        self._wait_s = batch_wait_s
        self._capacity = capacity
        # voice -> deque of (enqueued_at, item); OrderedDict keeps lanes by head age.
        self._lanes: OrderedDict[str, deque[tuple[float, T]]] = OrderedDict()
        self._size = 0
        self._changed = asyncio.Event()
        self._closed = False

    def put(self, voice_id: str, item: T) -> None:
        lane = self._lanes.get(voice_id)
        if lane is None:
            lane = self._lanes[voice_id] = deque()
        lane.append((time.monotonic(), item))
        self._size += 1
        self._changed.set()

    def qsize(self) -> int:
        return self._size

    @property
    def full(self) -> bool:
        return self._size >= self._capacity

    def close(self) -> None:
        self._closed = True
        self._changed.set()

    def drop(self, predicate: Callable[[T], bool]) -> list[T]:
        dropped: list[T] = []
        for voice in list(self._lanes):
            lane = self._lanes[voice]
            kept = deque((t, item) for t, item in lane if not predicate(item))
            dropped.extend(item for _, item in lane if predicate(item))
            if kept:
                self._lanes[voice] = kept
            else:
                del self._lanes[voice]
        self._size -= len(dropped)
        return dropped

    async def next_batch(self) -> tuple[str, list[T]]:
        while True:
            ready, wait = self._ready()
            if ready is not None:
                return ready, self._take(ready)
            if self._closed and self._size == 0:
                raise BatcherClosed
            self._changed.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._changed.wait(), timeout=wait)

    def _ready(self) -> tuple[str | None, float | None]:
        """The lane to release now, or how long until the oldest lane's wait runs out."""
        now = time.monotonic()
        oldest_voice: str | None = None
        oldest_t = float("inf")
        for voice, lane in self._lanes.items():
            if len(lane) >= self._max_batch and lane[0][0] < oldest_t:
                oldest_voice, oldest_t = voice, lane[0][0]
        if oldest_voice is not None:
            return oldest_voice, None
        for voice, lane in self._lanes.items():
            if lane[0][0] < oldest_t:
                oldest_voice, oldest_t = voice, lane[0][0]
        if oldest_voice is None:
            return None, None
        remaining = oldest_t + self._wait_s - now
        # When closing, hand out partial batches at once: nothing more will join them.
        if remaining <= 0 or self._closed:
            return oldest_voice, None
        return None, remaining

    def _take(self, voice: str) -> list[T]:
        lane = self._lanes[voice]
        batch = [lane.popleft()[1] for _ in range(min(self._max_batch, len(lane)))]
        if lane:
            self._lanes.move_to_end(voice)
        else:
            del self._lanes[voice]
        self._size -= len(batch)
        return batch
