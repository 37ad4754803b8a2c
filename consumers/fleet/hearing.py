"""When this process heard each worker on tts.fleet, and how current its reading is: the
clock side of the fleet view, apart from the routing rule (router.py).

    a status applied -> heard(worker): its local arrival time and its place in the read
        order (tts.fleet's log order, which no host's clock can skew: of two statuses that
        claim one partition, the one read later is the newer claim)
    a read of the topic ended -> mark_current(lag_s): the view is as current as the
        broker's last fetch answer (FleetView)
    silent_ms(worker): the time since its last status, counted up to that mark, not up to
        now: a process whose loop stalled (CPU starved, a long pause) has not heard the
        workers, which is not the workers going quiet. Counting it against them emptied the
        view of every worker at once (every route unrouted, a failover for every stream).
        A router fed statuses without a view (the simulations) counts up to now.
"""

from __future__ import annotations

from collections.abc import Callable


class Hearing:
    def __init__(self, clock: Callable[[], float]) -> None:
        self._clock = clock
        self._heard: dict[str, tuple[float, int]] = {}  # worker -> (arrived at, read order)
        self._reads = 0
        self._current_at: float | None = None  # None: no view marks it; now is the reference

    def heard(self, worker: str) -> None:
        self._reads += 1
        self._heard[worker] = (self._clock(), self._reads)

    def forget(self, worker: str) -> None:
        self._heard.pop(worker, None)

    def mark_current(self, lag_s: float = 0.0) -> None:
        """The view has read what tts.fleet held `lag_s` ago (its last answer from the
        broker): a worker's silence counts up to then."""
        at = self._clock() - max(0.0, lag_s)
        if self._current_at is None or at > self._current_at:
            self._current_at = at

    def view_age_s(self) -> float | None:
        """Seconds since the view's last answer from the broker; None before its first."""
        return None if self._current_at is None else self._clock() - self._current_at

    def silent_ms(self, worker: str) -> float:
        """Since the worker's last status, up to the view's last read (a worker heard)."""
        now = self._clock() if self._current_at is None else self._current_at
        return (now - self._heard[worker][0]) * 1000

    def order(self, worker: str) -> int:
        """Its last status's place in the read order (0: not heard)."""
        return self._heard.get(worker, (0.0, 0))[1]
