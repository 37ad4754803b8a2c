"""The worker's shape: the dispatchers, device slots and threads its settings make, in one place.

    WorkerSettings (VF_MAX_INFLIGHT, VF_INTERACTIVE_SLOTS; ranges checked when loaded)
        --WorkerShape.of()--> WorkerShape
            dispatchers ........ dispatch.py: one dispatch task each, by the lane it takes from
            threads ............ gate.BatchThreads: one pool thread per dispatcher
            batch_slots, interactive_reserve
                ................ gate.LaneGate (LaneGate.for_shape): the device slots by lane
            slots .............. fleet.py: each lane's slots in the worker's tts.fleet status
            device_calls ....... what the device runs at once: size its memory for this
            store_connections .. wiring.py: the S3 pool (every thread that may talk to S3)

The device runs up to `max_inflight` batch calls plus `interactive_slots` calls that only
interactive work may take: with the defaults (2 + 1) that is 3 engine calls at once, each up
to VF_MAX_BATCH requests of one voice. GPU memory must hold `device_calls` of them, not
`max_inflight` (docs/operations.md, "Sizing").

Why these dispatcher counts: twice `max_inflight` dispatchers take from both lanes
(interactive first), so that while `max_inflight` of them are in the engine the others
store finished outputs and the device is not idle meanwhile (measured: docs/benchmarks.md,
capacity). Under a backlog every one of them may then be holding a batch-lane batch, so
`max_inflight` more take interactive work only: a caller's request is taken at once and
waits only for the next free device slot (gate.py), not for a dispatcher.
"""

from __future__ import annotations

from dataclasses import dataclass, fields

from consumers.settings import WorkerSettings, check_field
from consumers.worker.batching import Lane

# Besides the dispatchers' threads the S3 pool serves the profile store, plus a spare
# (docs/benchmarks.md, capacity).
_STORE_EXTRA_CONNECTIONS = 2
_WORKER_FIELDS = {f.name: f for f in fields(WorkerSettings)}


@dataclass(frozen=True)
class WorkerShape:
    """`batch_slots` (VF_MAX_INFLIGHT) device calls any lane may take, plus
    `interactive_reserve` (VF_INTERACTIVE_SLOTS) only interactive work may take."""

    batch_slots: int
    interactive_reserve: int

    def __post_init__(self) -> None:
        # Settings are range-checked when loaded; a shape made in code is checked against
        # the same fields' bounds, so the two cannot drift apart.
        for name, value in (("max_inflight", self.batch_slots),
                            ("interactive_slots", self.interactive_reserve)):
            check_field(_WORKER_FIELDS[name], value)

    @classmethod
    def of(cls, worker: WorkerSettings) -> WorkerShape:
        """The shape of a worker's settings."""
        return cls(batch_slots=worker.max_inflight, interactive_reserve=worker.interactive_slots)

    @property
    def device_calls(self) -> int:
        """Engine calls the device may run at once: what its memory must hold."""
        return self.batch_slots + self.interactive_reserve

    @property
    def slots(self) -> dict[Lane, int]:
        """Device calls each lane may run at once: batch its shared slots, interactive those
        and the reserve."""
        return {"batch": self.batch_slots, "interactive": self.device_calls}

    @property
    def dispatchers(self) -> tuple[Lane | None, ...]:
        """The dispatch tasks, by the lane each takes work from (None: both, interactive
        first); why these counts: the module docstring."""
        interactive: Lane = "interactive"
        return (None,) * (2 * self.batch_slots) + (interactive,) * self.batch_slots

    @property
    def threads(self) -> int:
        """BatchThreads' pool: each dispatcher runs one batch or stream at a time."""
        return len(self.dispatchers)

    @property
    def store_connections(self) -> int:
        """S3 connections that may be busy at once: every batch thread, plus the rest."""
        return self.threads + _STORE_EXTRA_CONNECTIONS

    def describe(self) -> str:
        """One phrase for the start-up log line."""
        return (f"{self.device_calls} device calls at once (max_inflight {self.batch_slots} "
                f"+ interactive_slots {self.interactive_reserve}), {self.threads} dispatchers")
