"""Which worker gets each request, under the three policies the cache-locality bench compares.

voice-keyed: voice_id -> murmur2 partition (topics.partitioning, what every Kafka producer
does) -> the worker the consumer group assigned that partition to. round-robin: request i ->
worker i mod n. least_conn (nginx): an event simulation of the request stream — Poisson
arrivals at a set utilisation, each worker running `concurrency` requests at a time with a
FIFO queue behind them, exponential service times — and each arrival goes to the worker with
the fewest requests in flight (running + queued), ties taken in turn, as nginx does.
fleet-routed: the gateway's `FleetRouter` over the same event simulation, with each worker's
status (partitions, requests in flight, the voices it served last) every half second of it.
All are deterministic for a given seed; least_conn and fleet_routed can also hand back each
request's wait for a slot (simulated seconds, in units of the mean service time): the price
in latency of what a policy does for the cache.
"""

from __future__ import annotations

import heapq
import random
from collections import OrderedDict, deque
from collections.abc import Iterable, Mapping, Sequence

from topics.fleet import LaneLoad, WorkerStatus
from topics.partitioning import partition_for


def voice_keyed(voices: Sequence[str], owner_of: Mapping[int, int], partitions: int) -> list[int]:
    """Worker index per request: the owner of the voice's murmur2 partition."""
    missing = set(range(partitions)) - set(owner_of)
    if missing:
        raise ValueError(f"partitions without an owner: {sorted(missing)}")
    return [owner_of[partition_for(v, partitions)] for v in voices]


def round_robin(count: int, workers: int) -> list[int]:
    return [i % workers for i in range(count)]


def least_conn_pick(inflight: Sequence[int], turn: int) -> int:
    """nginx least_conn's choice: the worker with the fewest requests in flight, ties taken
    in turn from `turn` (the caller moves `turn` past the pick)."""
    fewest = min(inflight)
    workers = len(inflight)
    pick: int = next(w for w in (*range(turn, workers), *range(turn)) if inflight[w] == fewest)
    return pick


def simulated_status(worker: int, *, partitions: list[int], slots: int, running: int,
                     queued: int, hot: Iterable[str], now_s: float,
                     interval_s: float) -> WorkerStatus:
    """The batch-lane status a simulated worker publishes on tts.fleet: `hot` its cached
    voices, most recent first."""
    lane = LaneLoad(partitions=partitions, slots=slots, inflight=running, queued=queued)
    return WorkerStatus(worker=str(worker), at_ms=int(now_s * 1000),
                        interval_ms=int(interval_s * 1000), lanes={"batch": lane},
                        hot=list(hot))


def least_conn(count: int, workers: int, *, concurrency: int = 2, mean_service_s: float = 1.0,
               utilisation: float = 0.8, seed: int = 0,
               waits: list[float] | None = None) -> list[int]:
    """Worker index per request for nginx `least_conn` over `workers` equal servers."""
    if not 0 < utilisation < 1:
        raise ValueError(f"utilisation must be within (0, 1), got {utilisation}")
    rng = random.Random(seed)  # noqa: S311 - a reproducible workload, not crypto
    rate = utilisation * workers * concurrency / mean_service_s
    inflight = [0] * workers  # running + queued at each worker
    waiting = [0] * workers  # queued behind the running ones
    done: list[tuple[float, int]] = []  # (finish time, worker) of running requests
    queued: list[deque[tuple[float, int]]] = [deque() for _ in range(workers)]  # (arrival, i)
    if waits is not None:
        waits[:] = [0.0] * count  # request i's wait; 0 for those that found a slot free
    turn = 0  # where the round-robin among tied workers resumes
    now = 0.0
    routes: list[int] = []
    for index in range(count):
        now += rng.expovariate(rate)
        while done and done[0][0] <= now:
            finished_at, w = heapq.heappop(done)
            inflight[w] -= 1
            if waiting[w]:  # the next queued request starts as this one ends
                waiting[w] -= 1
                arrived, i = queued[w].popleft()
                if waits is not None:
                    waits[i] = finished_at - arrived
                heapq.heappush(done, (finished_at + rng.expovariate(1 / mean_service_s), w))
        pick = least_conn_pick(inflight, turn)
        turn = (pick + 1) % workers
        inflight[pick] += 1
        if inflight[pick] > concurrency:
            waiting[pick] += 1
            queued[pick].append((now, index))
        else:
            heapq.heappush(done, (now + rng.expovariate(1 / mean_service_s), pick))
        routes.append(pick)
    return routes


def fleet_routed(voices: Sequence[str], owner_of: Mapping[int, int], partitions: int, *,
                 concurrency: int = 2, mean_service_s: float = 1.0, utilisation: float = 0.8,
                 seed: int = 0, hot_entries: int = 256, status_s: float = 0.5,
                 balance: float = 1.25, home_queue: int | None = None,
                 copy_share: float | None = None, waits: list[float] | None = None) -> list[int]:
    """Worker index per request under fleet routing (consumers.fleet.FleetRouter, the
    gateway's rule; `home_queue`/`copy_share` None: the router's defaults) over the same
    event simulation as least_conn: each worker's status (its partitions, requests in
    flight, the last `hot_entries` voices it served: its cache's size) reaches the router
    every `status_s` of simulated time; the router counts its own requests from send to
    finish, as the gateway does."""
    from consumers.fleet.router import COPY_SHARE, HOME_QUEUE, FleetRouter

    rng = random.Random(seed)  # noqa: S311 - a reproducible workload, not crypto
    workers = sorted(set(owner_of.values()))
    rate = utilisation * len(workers) * concurrency / mean_service_s
    now = [0.0]
    router = FleetRouter(partitions=partitions, balance=balance, clock=lambda: now[0],
                         wall_ms=lambda: int(now[0] * 1000),
                         home_queue=HOME_QUEUE if home_queue is None else home_queue,
                         copy_share=COPY_SHARE if copy_share is None else copy_share)
    running = dict.fromkeys(workers, 0)
    queues: dict[int, deque[tuple[int, str]]] = {w: deque() for w in workers}
    arrived: dict[int, float] = {}  # request index -> arrival, while it waits
    if waits is not None:
        waits[:] = [0.0] * len(voices)  # request i's wait for a slot
    hot: dict[int, OrderedDict[str, None]] = {w: OrderedDict() for w in workers}
    done: list[tuple[float, int, int]] = []  # (finish time, worker, request index)
    owned = {w: sorted(p for p, o in owner_of.items() if o == w) for w in workers}

    def start(w: int, i: int, voice: str) -> None:
        if waits is not None:
            waits[i] = now[0] - arrived.pop(i)
        running[w] += 1
        hot[w][voice] = None
        hot[w].move_to_end(voice)
        if len(hot[w]) > hot_entries:
            hot[w].popitem(last=False)
        heapq.heappush(done, (now[0] + rng.expovariate(1 / mean_service_s), w, i))

    def publish() -> None:
        for w in workers:
            router.apply(simulated_status(w, partitions=owned[w], slots=concurrency,
                                          running=running[w], queued=len(queues[w]),
                                          hot=reversed(hot[w]), now_s=now[0],
                                          interval_s=status_s))

    next_status = 0.0
    routes: list[int] = []
    for i, voice in enumerate(voices):
        arrival = now[0] + rng.expovariate(rate)
        while done and done[0][0] <= arrival:
            now[0], w, finished = heapq.heappop(done)
            running[w] -= 1
            router.done(f"r{finished}")
            if queues[w]:
                start(w, *queues[w].popleft())
        now[0] = arrival
        if now[0] >= next_status:
            publish()
            next_status = now[0] + status_s
        route = router.route(voice)
        w = int(route.worker) if route.worker is not None else owner_of[
            partition_for(voice, partitions)]
        router.sent(f"r{i}", route)
        arrived[i] = now[0]
        if running[w] < concurrency:
            start(w, i, voice)
        else:
            queues[w].append((i, voice))
        routes.append(w)
    return routes
