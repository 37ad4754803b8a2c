"""The engine's device slots, handed out by lane: interactive first, batch keeps its share.

    dispatcher task: LANE.set(batch's lane) -> asyncio.to_thread(processor.process_batch)
        (to_thread copies the task's context, so the thread sees the lane)
    processor thread: `with device_gate:` (pipeline/synthesis.py's device slots) -> waits in
        its lane's FIFO -> a freed slot goes to the head of the interactive FIFO, except that
        batch.ShareRule gives batch its minimum share of the slots both lanes wait for

Why a gate as well as the batcher's order: twice max_inflight dispatchers take batches so the
engine stays busy while finished outputs are stored, so when an interactive request comes,
up to max_inflight batch-lane batches may already be taken and waiting for a slot. A plain
semaphore would let them all in first; this gate lets the interactive batch in at the next
free slot.
"""

from __future__ import annotations

import threading
from collections import deque
from contextvars import ContextVar
from types import TracebackType

from consumers.worker.batching import LANES, Lane, ShareRule

LANE: ContextVar[Lane] = ContextVar("vf_lane", default="batch")


class LaneGate:
    """A counting semaphore over `slots` whose waiters are served by lane (see above)."""

    def __init__(self, slots: int, *, batch_share: float) -> None:
        if slots < 1:
            raise ValueError(f"slots must be >= 1, got {slots!r}")
        self._cond = threading.Condition()
        self._free = slots
        self._waiting: dict[Lane, deque[object]] = {lane: deque() for lane in LANES}
        self._share = ShareRule(batch_share)
        self._chosen: object | None = None  # the waiter the next free slot belongs to

    def __enter__(self) -> LaneGate:
        lane, token = LANE.get(), object()
        with self._cond:
            self._waiting[lane].append(token)
            self._elect()
            try:
                while self._chosen is not token:
                    self._cond.wait()
            except BaseException:  # interrupted while waiting: leave the line cleanly
                self._waiting[lane].remove(token)
                if self._chosen is token:
                    self._chosen = None
                self._elect()
                raise
            self._waiting[lane].popleft()  # the chosen waiter is always its lane's head
            self._chosen = None
            self._free -= 1
            self._elect()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        with self._cond:
            self._free += 1
            self._elect()

    def waiting(self, lane: Lane) -> int:
        with self._cond:
            return len(self._waiting[lane])

    def _elect(self) -> None:
        """Under the lock: pick who gets the next free slot, once, and wake the waiters.
        One decision per slot keeps the share rule's count honest."""
        if self._chosen is not None or self._free <= 0:
            return
        ready = [lane for lane in LANES if self._waiting[lane]]
        if not ready:
            return
        lane = self._share.contested() if len(ready) == 2 else ready[0]
        self._chosen = self._waiting[lane][0]
        self._cond.notify_all()
