"""Which worker gets each request, under the three policies the cache-locality bench compares.

voice-keyed: voice_id -> murmur2 partition (topics.partitioning, what every Kafka producer
does) -> the worker the consumer group assigned that partition to. round-robin: request i ->
worker i mod n. least_conn (nginx): an event simulation of the request stream — Poisson
arrivals at a set utilisation, each worker running `concurrency` requests at a time with a
FIFO queue behind them, exponential service times — and each arrival goes to the worker with
the fewest requests in flight (running + queued), ties taken in turn, as nginx does.
All three are deterministic for a given seed.
"""

from __future__ import annotations

import heapq
import random
from collections.abc import Mapping, Sequence

from topics.partitioning import partition_for


def voice_keyed(voices: Sequence[str], owner_of: Mapping[int, int], partitions: int) -> list[int]:
    """Worker index per request: the owner of the voice's murmur2 partition."""
    missing = set(range(partitions)) - set(owner_of)
    if missing:
        raise ValueError(f"partitions without an owner: {sorted(missing)}")
    return [owner_of[partition_for(v, partitions)] for v in voices]


def round_robin(count: int, workers: int) -> list[int]:
    return [i % workers for i in range(count)]


def least_conn(count: int, workers: int, *, concurrency: int = 2, mean_service_s: float = 1.0,
               utilisation: float = 0.8, seed: int = 0) -> list[int]:
    """Worker index per request for nginx `least_conn` over `workers` equal servers."""
    if not 0 < utilisation < 1:
        raise ValueError(f"utilisation must be within (0, 1), got {utilisation}")
    rng = random.Random(seed)  # noqa: S311 - a reproducible workload, not crypto
    rate = utilisation * workers * concurrency / mean_service_s
    inflight = [0] * workers  # running + queued at each worker
    waiting = [0] * workers  # queued behind the running ones
    done: list[tuple[float, int]] = []  # (finish time, worker) of running requests
    turn = 0  # where the round-robin among tied workers resumes
    now = 0.0
    routes: list[int] = []
    for _ in range(count):
        now += rng.expovariate(rate)
        while done and done[0][0] <= now:
            finished_at, w = heapq.heappop(done)
            inflight[w] -= 1
            if waiting[w]:  # the next queued request starts as this one ends
                waiting[w] -= 1
                heapq.heappush(done, (finished_at + rng.expovariate(1 / mean_service_s), w))
        fewest = min(inflight)
        pick = next(w for w in (*range(turn, workers), *range(turn)) if inflight[w] == fewest)
        turn = (pick + 1) % workers
        inflight[pick] += 1
        if inflight[pick] > concurrency:
            waiting[pick] += 1
        else:
            heapq.heappush(done, (now + rng.expovariate(1 / mean_service_s), pick))
        routes.append(pick)
    return routes
