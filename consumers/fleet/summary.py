"""What the fleet view says about each worker, in the shape both of its readers print:
the gateway's GET /v1/fleet (consumers.gateway.console_api) and `voicefactory fleet show`
(consumers.clients.fleet).

    router.statuses() (each worker's newest WorkerStatus, from tts.fleet)
        -> worker_views: per worker, its lanes' partitions and load, hot voices, age, and
           since it started its profile cache lookups and failed results by code
        -> fleet_counts: the lookups and failures summed over the workers heard
"""

from __future__ import annotations

import msgspec

from consumers.fleet.router import LANES, FleetRouter
from topics.fleet import ProfileCounts, WorkerStatus


class FleetLane(msgspec.Struct, kw_only=True):
    partitions: list[int]  # of the plain lane topic
    shards: list[int]  # of the lane's shard topic, where routers send
    backlog: int
    queued: int
    inflight: int
    slots: int
    load: int  # backlog + queued + inflight


class FleetCache(msgspec.Struct, kw_only=True):
    """Profile cache lookups since a worker started (or summed over the fleet)."""

    hit: int
    store: int
    miss: int
    hit_ratio: float | None  # hit / lookups; None before any lookup


class CodeCount(msgspec.Struct, kw_only=True):
    code: str  # an error code of the closed set (topics.errors.ErrorCode)
    count: int


class FleetWorker(msgspec.Struct, kw_only=True):
    id: str
    alive: bool
    draining: bool
    age_s: float  # since its last status on tts.fleet
    hot_voices: int
    lanes: dict[str, FleetLane]  # "batch", "interactive"
    cache: FleetCache | None  # None: a worker whose status carries no counts (older)
    errors: dict[str, int]  # answers other than succeeded, by error code, since it started


def hit_ratio(profiles: ProfileCounts | None) -> float | None:
    """Lookups answered from a worker's memory, of all lookups; None before any."""
    if profiles is None or profiles.lookups == 0:
        return None
    return round(profiles.hit / profiles.lookups, 4)


def cache_of(profiles: ProfileCounts) -> FleetCache:
    return FleetCache(hit=profiles.hit, store=profiles.store, miss=profiles.miss,
                      hit_ratio=hit_ratio(profiles))


def fleet_counts(statuses: list[WorkerStatus]) -> tuple[FleetCache, list[CodeCount]]:
    """The workers' own counts, summed: profile cache lookups with their hit ratio (workers
    that send none are left out) and failed results by error code, most first."""
    profiles = ProfileCounts()
    errors: dict[str, int] = {}
    for status in statuses:
        if status.profiles is not None:
            profiles.hit += status.profiles.hit
            profiles.store += status.profiles.store
            profiles.miss += status.profiles.miss
        for code, count in status.errors.items():
            errors[code] = errors.get(code, 0) + count
    return cache_of(profiles), [CodeCount(code=code, count=count) for code, count in
                                sorted(errors.items(), key=lambda e: (-e[1], e[0]))]


def worker_views(router: FleetRouter, now_ms: float) -> list[FleetWorker]:
    """Every worker the router holds a status of, by ID; `age_s` from `now_ms` (epoch)."""
    out = []
    for status in router.statuses():
        lanes: dict[str, FleetLane] = {}
        for name in LANES:
            lane = status.lane(name)
            lanes[name] = FleetLane(partitions=lane.partitions, shards=lane.shards,
                                    backlog=lane.backlog,
                                    queued=lane.queued, inflight=lane.inflight,
                                    slots=lane.slots, load=lane.load)
        out.append(FleetWorker(id=status.worker, alive=router.alive(status.worker),
                               draining=status.draining,
                               age_s=round((now_ms - status.at_ms) / 1000, 1),
                               hot_voices=len(status.hot), lanes=lanes,
                               cache=None if status.profiles is None
                               else cache_of(status.profiles),
                               errors=dict(status.errors)))
    return out
