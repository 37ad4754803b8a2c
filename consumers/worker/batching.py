"""The worker's local queue: requests grouped by lane and voice, released as micro-batches.

fetch loop: put(voice_id, item, lane) appends to the queue of (lane, voice) (never blocks,
never drops; the fetch loop reads `qsize(lane)` and pauses partitions) -> dispatchers: await
next_batch() -> (voice_id, up to `max_batch` items of that one voice and lane) -> the engine.
With `mixable` (the engine mixes voices in a call: pipeline.engines.base.VoiceMixer) a batch
taken from a queue whose key passes it is topped up to `max_batch` from the lane's other
such queues, oldest head first; streamed requests' queues never pass it. The batch lane's
mixable queues are then released when together they fill a batch or `idle()` says the
device has a free slot, not after `batch_wait_s`: a batch taken early would wait for the
device anyway, frozen, while later arrivals start batches of their own (the worker calls
poke() when a slot frees).

A queue is ready once it holds `max_batch` items or its oldest item has waited
`batch_wait_s` (with max_batch=1 every item is ready at once), or at once while `idle()` says
the engine has a free slot: waiting for company only pays when the device is busy, and a
lone request on an idle worker would otherwise wait out the window for nothing. Lanes
(DESIGN.md, "Lanes"): a ready interactive queue goes before any batch queue, except that
`ShareRule` hands at least `batch_share` of the turns both lanes contend for to batch, so a
steady interactive stream cannot starve the backlog. Within a lane the queue whose oldest
item is oldest goes first, so a hot voice with always-full queues cannot starve a quiet one
for longer than `batch_wait_s` plus one batch. On revocation, drop(predicate) takes back the
waiting items of revoked partitions (and a cancel takes back its requests). close() starts
the drain: what is queued is still handed out (partial batches at once), then next_batch
raises `BatcherClosed`.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import math
import time
from collections import deque
from collections.abc import Callable
from typing import Generic, Literal, NamedTuple, TypeVar

T = TypeVar("T")
Lane = Literal["interactive", "batch"]
LANES: tuple[Lane, ...] = ("interactive", "batch")  # in priority order


class BatcherClosed(Exception):
    """The batcher was closed and everything queued has been handed out."""


class _Entry(NamedTuple, Generic[T]):
    seq: int  # global arrival order, so drop() can return items in the order they came
    enqueued_at: float  # time.monotonic()
    item: T


class ShareRule:
    """Which lane takes a turn that both lanes contend for: interactive, except that every
    turn adds `batch_share` to a credit and a full credit buys batch the turn. 0.1 gives batch
    the 10th, 20th, ... contested turn; 0 is strict priority; 1 lets batch go first."""

    def __init__(self, batch_share: float) -> None:
        if not math.isfinite(batch_share) or not 0 <= batch_share <= 1:
            raise ValueError(f"batch_share must be within [0, 1], got {batch_share!r}")
        self.batch_share = batch_share
        self._credit = 0.0

    def contested(self) -> Lane:
        self._credit += self.batch_share
        # The tolerance: ten additions of 0.1 sum to 0.9999999999999999.
        if self._credit >= 1 - 1e-9:
            self._credit -= 1
            return "batch"
        return "interactive"


class VoiceBatcher(Generic[T]):
    def __init__(self, *, max_batch: int, batch_wait_s: float, capacity: int,
                 idle: Callable[[], bool] | None = None, batch_share: float = 0.1,
                 mixable: Callable[[str], bool] | None = None) -> None:
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
        self._mixable = mixable  # None: a batch is one queue's
        self._share = ShareRule(batch_share)
        self._queues: dict[tuple[Lane, str], deque[_Entry[T]]] = {}
        self._sizes: dict[Lane, int] = dict.fromkeys(LANES, 0)
        self._seq = itertools.count()
        self._changed = asyncio.Event()  # set on put/close; waiters re-check the lanes
        self._closed = False

    def put(self, voice_id: str, item: T, lane: Lane = "batch") -> None:
        """Queue `item` for `voice_id` in `lane`; never blocks and never drops, even past
        `capacity`.

        Accepted after close() as well (a retry that raced the drain): it is handed out
        before `BatcherClosed` as long as a dispatcher is still asking.
        """
        if lane not in self._sizes:
            raise ValueError(f"lane must be one of {LANES}, got {lane!r}")
        queue = self._queues.get((lane, voice_id))
        if queue is None:
            queue = self._queues[(lane, voice_id)] = deque()
        queue.append(_Entry(next(self._seq), time.monotonic(), item))
        self._sizes[lane] += 1
        self._changed.set()

    def poke(self) -> None:
        """Wake the waiting dispatchers to look again (`idle()` may have changed)."""
        self._changed.set()

    def qsize(self, lane: Lane | None = None) -> int:
        """Items waiting in `lane`, or in both lanes."""
        return sum(self._sizes.values()) if lane is None else self._sizes[lane]

    @property
    def full(self) -> bool:
        return self.qsize() >= self.capacity

    def close(self) -> None:
        self._closed = True
        self._changed.set()

    def drop(self, predicate: Callable[[T], bool]) -> list[T]:
        """Remove and return the waiting items that match, in the order they were put."""
        dropped: list[_Entry[T]] = []
        for key in list(self._queues):
            kept: deque[_Entry[T]] = deque()
            taken = 0
            for entry in self._queues[key]:
                if predicate(entry.item):
                    dropped.append(entry)
                    taken += 1
                else:
                    kept.append(entry)
            self._sizes[key[0]] -= taken
            if kept:
                self._queues[key] = kept
            else:
                del self._queues[key]
        dropped.sort(key=lambda entry: entry.seq)
        return [entry.item for entry in dropped]

    async def next_batch(self, lane: Lane | None = None) -> tuple[str, list[T]]:
        """Wait for the next ready queue (of `lane` only, if given) and take up to
        `max_batch` items from it (topped up from other queues when mixing: `mixable`).

        Raises `BatcherClosed` once closed and empty (of `lane`, if given); cancelling a
        wait loses nothing.
        """
        while True:
            key, wait_s = self._pick(time.monotonic(), lane)
            if key is not None:
                return key[1], self._take(key)
            if self._closed:
                raise BatcherClosed("batcher closed and drained")
            # No await between the check above and clear(): a put cannot slip in between.
            self._changed.clear()
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(wait_s):
                    await self._changed.wait()

    def _pick(self, now: float,
              only: Lane | None = None) -> tuple[tuple[Lane, str] | None, float | None]:
        """The ready queue to serve next (see the module docstring), else the seconds until
        the first one is ready (None: nothing queued). O(number of queues), bounded by the
        queue size."""
        best: dict[Lane, tuple[Lane, str]] = {}
        best_t: dict[Lane, float] = {}
        next_ready = math.inf
        # Closing: nothing more will join a partial batch, so hand it out now.
        release_all = self._closed or (bool(self._queues) and self._idle())
        mixable = self._mixable
        # Mixing: the batch lane's mixable queues go together, once they fill a batch or the
        # device has room (module docstring), never on batch_wait_s alone.
        gated = (lambda key: key[0] == "batch" and mixable(key[1])) if mixable else None
        pooled = (sum(len(q) for k, q in self._queues.items() if gated(k))
                  if gated and not release_all else 0)
        for key, queue in self._queues.items():
            if only is not None and key[0] != only:
                continue
            head_t = queue[0].enqueued_at
            due = head_t + self.batch_wait_s
            if gated and gated(key):
                if ((release_all or pooled >= self.max_batch)
                        and head_t < best_t.get(key[0], math.inf)):
                    best[key[0]], best_t[key[0]] = key, head_t
                continue  # no timer: a put or poke() wakes the dispatchers
            if len(queue) >= self.max_batch or due <= now or release_all:
                lane = key[0]
                if head_t < best_t.get(lane, math.inf):
                    best[lane], best_t[lane] = key, head_t
            elif due < next_ready:
                next_ready = due
        if len(best) == 2:
            return best[self._share.contested()], None
        if best:
            return next(iter(best.values())), None
        return None, (None if next_ready == math.inf else next_ready - now)

    def _take(self, key: tuple[Lane, str]) -> list[T]:
        batch = self._pop(key, self.max_batch)
        mixable = self._mixable
        if mixable is None or len(batch) >= self.max_batch or not mixable(key[1]):
            return batch
        # The engine mixes voices: the room left goes to the lane's other mixable queues,
        # oldest head first, so a voice that never has company still shares a call.
        others = sorted((queue[0].enqueued_at, other) for other, queue in self._queues.items()
                        if other[0] == key[0] and mixable(other[1]))
        for _, other in others:
            if len(batch) >= self.max_batch:
                break
            batch += self._pop(other, self.max_batch - len(batch))
        return batch

    def _pop(self, key: tuple[Lane, str], most: int) -> list[T]:
        queue = self._queues[key]
        batch = [queue.popleft().item for _ in range(min(most, len(queue)))]
        if not queue:
            del self._queues[key]
        self._sizes[key[0]] -= len(batch)
        return batch
