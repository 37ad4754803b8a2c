"""The engine's device slots, handed out by lane: interactive first, batch keeps its share.

    dispatcher task: BatchThreads.run(lane, processor.process_batch, items), or for a
        streamed request (streams.py) BatchThreads.run(lane, processor.process_stream, ...)
    processor thread (BatchThreads' own pool): in_lane sets LANE (a ContextVar) ->
        `with device_gate:`
        (the processor's device slots: pipeline/synthesis.py takes one for the profile
        lookup and again for the engine call, pipeline/streaming.py one for both) -> waits
        in its lane's FIFO -> a freed slot goes to the head of the interactive FIFO, except
        that batch.ShareRule gives batch its minimum share of the slots both lanes wait for

An interactive batch or stream holds its slot for the whole call: in_lane enters the gate
first and the processor's own entries are re-entrant for that thread. Otherwise the slot a
batch gives back between the profile lookup and the engine call would go to a waiting
batch-lane batch, and the caller would queue for a slot twice (measured: ~2x the wait behind
a backlog).

Why a gate as well as the batcher's order: twice max_inflight dispatchers take batches so the
engine stays busy while finished outputs are stored (shape.py), so when an interactive
request comes, up to max_inflight batch-lane batches may already be taken and waiting for a
slot. A plain semaphore would let them all in first; this gate lets the interactive batch in
at the next free slot.

Slot counts come from the worker's shape (shape.WorkerShape, LaneGate.for_shape): max_inflight
shared slots plus interactive_slots reserved ones, so the device runs up to
`shape.device_calls` (3 by default) engine calls at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import threading
from collections import deque
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from contextvars import ContextVar
from types import TracebackType
from typing import ParamSpec, TypeVar

from consumers.worker.batching import LANES, Lane, ShareRule
from consumers.worker.shape import WorkerShape

P = ParamSpec("P")
R = TypeVar("R")

LANE: ContextVar[Lane] = ContextVar("vf_lane", default="batch")


class LaneGate:
    """A counting semaphore over `slots` whose waiters are served by lane (see above), plus
    `interactive_slots` that only interactive work may take.

    The reserve is what keeps a caller from waiting for a running batch to end (nothing is
    preempted): an interactive batch takes a reserved slot when one is free, else a shared
    one, first in line; batch work never takes a reserved slot, so the reserve costs batch
    throughput nothing. It lets the device run up to slots + interactive_slots batches at
    once (`capacity`) while callers are served (one request each, usually).
    """

    def __init__(self, slots: int, *, batch_share: float, interactive_slots: int = 0) -> None:
        if slots < 1:
            raise ValueError(f"slots must be >= 1, got {slots!r}")
        if interactive_slots < 0:
            raise ValueError(f"interactive_slots must be >= 0, got {interactive_slots!r}")
        self._cond = threading.Condition()
        self._free = slots
        self._reserve = interactive_slots  # free reserved slots
        self._waiting: dict[Lane, deque[object]] = {lane: deque() for lane in LANES}
        self._share = ShareRule(batch_share)
        # The waiter the next free slot belongs to, and whether that slot is a reserved one.
        self._chosen: tuple[object, bool] | None = None
        # thread ident -> [entries, from the reserve] (re-entrant per thread)
        self._held: dict[int, list[int]] = {}
        self.capacity = slots + interactive_slots  # device calls at once, both kinds
        # Called (in the caller's thread, outside the lock) when a slot frees, and when a
        # call takes one and another is still free: the worker wakes its batcher with it,
        # as batches may wait for the device (batching.py).
        self.on_room: Callable[[], None] | None = None

    @classmethod
    def for_shape(cls, shape: WorkerShape, *, batch_share: float) -> LaneGate:
        """The gate of a worker of this shape: its shared slots and its reserve."""
        return cls(shape.batch_slots, batch_share=batch_share,
                   interactive_slots=shape.interactive_reserve)

    def __enter__(self) -> LaneGate:
        lane, token, me = LANE.get(), object(), threading.get_ident()
        with self._cond:
            if me in self._held:
                self._held[me][0] += 1
                return self
            self._waiting[lane].append(token)
            self._elect()
            try:
                while self._chosen is None or self._chosen[0] is not token:
                    self._cond.wait()
            except BaseException:  # interrupted while waiting: leave the line cleanly
                self._waiting[lane].remove(token)
                if self._chosen is not None and self._chosen[0] is token:
                    self._chosen = None
                self._elect()
                raise
            reserved = self._chosen[1]
            self._waiting[lane].popleft()  # the chosen waiter is always its lane's head
            self._chosen = None
            if reserved:
                self._reserve -= 1
            else:
                self._free -= 1
            self._held[me] = [1, int(reserved)]
            self._elect()
            room = self._free > 0
        if room and self.on_room is not None:
            self.on_room()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        me = threading.get_ident()
        with self._cond:
            held = self._held[me]
            held[0] -= 1
            if held[0]:
                return
            del self._held[me]
            if held[1]:
                self._reserve += 1
            else:
                self._free += 1
            self._elect()
        if self.on_room is not None:
            self.on_room()

    def has_free_slot(self) -> bool:
        """Whether a batch-lane call would get a shared slot at once: one is free and no
        call waits for it. A hint (read without the lock): the gate still decides."""
        return self._free > 0 and not any(self._waiting.values())

    def waiting(self, lane: Lane) -> int:
        with self._cond:
            return len(self._waiting[lane])

    def _elect(self) -> None:
        """Under the lock: pick who gets the next free slot, once, and wake the waiters.
        One decision per slot keeps the share rule's count honest."""
        if self._chosen is not None:
            return
        callers = self._waiting["interactive"]
        if callers and self._reserve > 0:
            self._chosen = (callers[0], True)
        elif self._free > 0:
            ready = [lane for lane in LANES if self._waiting[lane]]
            if not ready:
                return
            lane = self._share.contested() if len(ready) == 2 else ready[0]
            self._chosen = (self._waiting[lane][0], False)
        else:
            return
        self._cond.notify_all()


def in_lane(gate: LaneGate | None, lane: Lane, fn: Callable[P, R], *args: P.args,
            **kwargs: P.kwargs) -> R:
    """Call `fn` in this (worker) thread as `lane`; an interactive call holds one slot of
    `gate` from start to end (see the module docstring)."""
    LANE.set(lane)
    hold: contextlib.AbstractContextManager[object] = (
        gate if gate is not None and lane == "interactive" else contextlib.nullcontext())
    with hold:
        return fn(*args, **kwargs)


class BatchThreads:
    """The threads batches and streamed requests run in, one per dispatcher (each runs one
    batch or one stream at a time), each call marked with its lane.

    Not asyncio's default executor: it has min(32, cores + 4) threads, which the dispatchers
    alone would fill on a small machine, and aiokafka's DNS lookups (every connection) and
    the readiness probe queue there behind a slow batch (measured: a client sharing the
    process waited 1-2 s to connect).
    """

    def __init__(self, gate: LaneGate | None, threads: int) -> None:
        self._gate = gate
        self._pool = ThreadPoolExecutor(max_workers=threads, thread_name_prefix="vf-batch")

    async def run(self, lane: Lane, fn: Callable[P, R], *args: P.args,
                  **kwargs: P.kwargs) -> R:
        call = functools.partial(in_lane, self._gate, lane, fn, *args, **kwargs)
        return await asyncio.get_running_loop().run_in_executor(self._pool, call)

    def shutdown(self) -> None:
        """No new calls; running ones finish in their threads (the drain waited for them)."""
        self._pool.shutdown(wait=False)
