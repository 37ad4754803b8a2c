"""`voicefactory fleet show` and `fleet route VOICE`: the fleet view as a router sees it,
for an operator asking which workers are up, how much waits where, and why a voice's
requests run where they do.

    tts.fleet (group-less, every partition from the beginning, up to the end offsets it had
    at start, then one status interval more: FleetView) -> a FleetRouter with this
    process's VF_ROUTE_* settings
        show:  worker_views + fleet_counts (what GET /v1/fleet says of the workers)
               -> one row per worker and lane, then the fleet's totals; or JSON
        route: router.order(voice, lane): the voice's workers in the order its routing keys
               meet them (its home first), each with its load, slots and whether it holds
               the voice's profile; then router.route(voice, lane), the route a router
               with no traffic of its own picks now; or JSON

A status is a worker's word of at most a few intervals ago, and a router's popularity
counts are its own: a gateway that has sent a voice often gives it more copies than this
process, which has sent nothing, so `route` shows where a quiet voice's next request goes.
"""

from __future__ import annotations

import asyncio
import time
from typing import Literal, TextIO

import msgspec

from consumers.fleet.router import FleetRouter, Route
from consumers.fleet.sending import lane_topics
from consumers.fleet.summary import (
    CodeCount,
    FleetCache,
    FleetLane,
    FleetWorker,
    fleet_counts,
    worker_views,
)
from consumers.fleet.view import FleetView
from consumers.settings import Settings
from topics.fleet import RouteLane, WorkerStatus, routing_key
from topics.specs import REQUESTS, topic_names


class FleetShow(msgspec.Struct, kw_only=True):
    """`fleet show --json`: the workers heard on tts.fleet and their summed counts."""

    object: Literal["fleet"] = "fleet"
    topic: str
    records: int  # statuses (and tombstones) read
    workers: list[FleetWorker]
    cache: FleetCache  # summed over the workers heard
    errors_by_code: list[CodeCount]


class Preference(msgspec.Struct, kw_only=True):
    shard: int
    key: str  # the routing key that lands on `partition`
    partition: int
    worker: str
    load: int  # what waits for the worker in the lane: its last status plus nothing of ours
    slots: int
    hot: bool  # its status lists the voice's profile as held


class RouteChoice(msgspec.Struct, kw_only=True):
    reason: str  # home, copy, held, joined, moved (a profile build there) or unrouted
    key: str
    shard: int
    partition: int | None  # None: no live worker, Kafka's partitioner picks from the key
    worker: str | None
    topic: str


class FleetRouteAnswer(msgspec.Struct, kw_only=True):
    """`fleet route VOICE --json`."""

    object: Literal["fleet.route"] = "fleet.route"
    voice_id: str
    lane: RouteLane
    topic: str  # where the voice's routing keys are hashed: the lane's shard or plain topic
    partitions: int
    order: list[Preference]
    route: RouteChoice


async def read_fleet(settings: Settings, *, catch_up_s: float = 5.0,
                     listen_s: float | None = None) -> tuple[FleetRouter, FleetView]:
    """A router holding every status on tts.fleet now (the view is stopped again).
    Raises RuntimeError when the topic does not exist.

    After the history it listens `listen_s` more (one status interval and a little, by
    default): the history's statuses are judged by their timestamps against this host's
    clock, and a worker whose host clock runs behind would look dead in them; its next
    status, read as it is written, counts whatever the clocks say (FleetRouter.apply)."""
    routing = settings.routing
    if listen_s is None:
        listen_s = routing.fleet_interval_ms / 1000 + 0.2
    router = FleetRouter(partitions=REQUESTS.partitions, balance=routing.balance,
                         home_queue=routing.home_queue, copy_share=routing.copy_share)
    topic = topic_names(settings.kafka.topic_prefix).fleet
    view = FleetView(settings.kafka, topic, router, catch_up_s=catch_up_s)
    async with view:
        if not view.available:
            raise RuntimeError(f"topic {topic} does not exist; run `voicefactory topics "
                               "create`")
        await asyncio.sleep(listen_s)
    return router, view


def show(router: FleetRouter, view: FleetView, *, now_ms: float | None = None) -> FleetShow:
    statuses = router.statuses()
    cache, by_code = fleet_counts(statuses)
    return FleetShow(topic=view.topic, records=view.records,
                     workers=worker_views(router, time.time() * 1000 if now_ms is None
                                          else now_ms),
                     cache=cache, errors_by_code=by_code)


def explain_route(settings: Settings, router: FleetRouter, voice_id: str,
                  lane: RouteLane) -> FleetRouteAnswer:
    names = topic_names(settings.kafka.topic_prefix)
    plain, shards = lane_topics(names, lane)
    partitions, sharded = router.span(lane)
    topic = shards if sharded else plain
    order = [Preference(shard=shard, key=routing_key(voice_id, shard), partition=partition,
                        worker=worker, load=router.load(lane, worker),
                        slots=_slots(router, worker, lane),
                        hot=voice_id in _hot(router, worker))
             for shard, partition, worker in router.order(voice_id, lane)]
    route: Route = router.route(voice_id, lane)
    return FleetRouteAnswer(
        voice_id=voice_id, lane=lane, topic=topic, partitions=partitions, order=order,
        route=RouteChoice(reason=route.reason, key=route.key, shard=route.shard,
                          partition=route.partition, worker=route.worker,
                          topic=shards if route.sharded else plain))


def _status(router: FleetRouter, worker: str) -> WorkerStatus | None:
    return next((s for s in router.statuses() if s.worker == worker), None)


def _slots(router: FleetRouter, worker: str, lane: RouteLane) -> int:
    status = _status(router, worker)
    return status.lane(lane).slots if status is not None else 0


def _hot(router: FleetRouter, worker: str) -> list[str]:
    status = _status(router, worker)
    return status.hot if status is not None else []


# -- text ------------------------------------------------------------------------------------

REASON_TEXT = {"home": "its home", "copy": "one of its copies, the least loaded",
               "held": "not a copy, but it holds the profile",
               "joined": "a copy where this router's requests of it wait",
               "moved": "past its copies' share: it loads the profile there"}


def spans(numbers: list[int]) -> str:
    """Partitions as ranges: [0, 1, 2, 5, 7, 8] -> "0-2,5,7-8"; "-" for none."""
    if not numbers:
        return "-"
    ordered = sorted(set(numbers))
    parts: list[str] = []
    start = prev = ordered[0]
    for n in [*ordered[1:], None]:
        if n is not None and n == prev + 1:
            prev = n
            continue
        parts.append(str(start) if start == prev else f"{start}-{prev}")
        if n is not None:
            start = prev = n
    return ",".join(parts)


def table(rows: list[list[str]]) -> list[str]:
    """Left-aligned columns two spaces apart, the first row a header."""
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return ["  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True))
            .rstrip() for row in rows]


def _state(worker: FleetWorker) -> str:
    return "draining" if worker.draining else "live" if worker.alive else "silent"


def _errors(counts: dict[str, int] | list[CodeCount]) -> str:
    pairs = (counts.items() if isinstance(counts, dict)
             else ((c.code, c.count) for c in counts))
    text = ", ".join(f"{code} {count}" for code, count in pairs)
    return text or "-"


def _ratio(cache: FleetCache | None) -> str:
    if cache is None or cache.hit_ratio is None:
        return "-"
    return f"{cache.hit_ratio:.4f}"


def show_lines(answer: FleetShow, settings: Settings) -> list[str]:
    routing = settings.routing
    live = sum(w.alive for w in answer.workers)
    draining = sum(w.draining for w in answer.workers)
    head = (f"{answer.topic}: {len(answer.workers)} workers ({live} live, {draining} "
            f"draining), {answer.records} records read; routers here would use balance "
            f"{routing.balance:g}, home queue {routing.home_queue}, copy share "
            f"{routing.copy_share:g}")
    if not answer.workers:
        return [head, "no worker status within its last 3 intervals: is a worker running "
                      "on this cluster and topic prefix?"]
    rows = [["WORKER", "STATE", "AGE", "LANE", "PARTITIONS", "SHARDS", "BACKLOG", "QUEUED",
             "RUNNING", "SLOTS", "HOT", "HIT RATIO", "FAILED"]]
    for worker in answer.workers:
        for i, (name, lane) in enumerate(worker.lanes.items()):
            first = i == 0
            rows.append([worker.id if first else "", _state(worker) if first else "",
                         f"{worker.age_s:.1f}s" if first else "", name,
                         spans(lane.partitions), spans(lane.shards), str(lane.backlog),
                         str(lane.queued), str(lane.inflight), str(lane.slots),
                         str(worker.hot_voices) if first else "",
                         _ratio(worker.cache) if first else "",
                         _errors(worker.errors) if first else ""])
    lines = [head, "", *table(rows), ""]
    lookups = answer.cache.hit + answer.cache.store + answer.cache.miss
    loads = []
    for name in answer.workers[0].lanes:
        lanes: list[FleetLane] = [w.lanes[name] for w in answer.workers if w.alive]
        loads.append(f"{name} {sum(la.load for la in lanes)} waiting or running over "
                     f"{sum(la.slots for la in lanes)} slots")
    lines.append("live workers: " + "; ".join(loads))
    lines.append(f"profile lookups since the workers started: {lookups}, hit ratio "
                 f"{_ratio(answer.cache)}; failed results: {_errors(answer.errors_by_code)}")
    return lines


def route_lines(answer: FleetRouteAnswer) -> list[str]:
    head = (f"voice {answer.voice_id}, {answer.lane} lane: keys hashed over "
            f"{answer.topic} ({answer.partitions} partitions)")
    if not answer.order:
        return [head, f"no live worker holds a partition of {answer.topic}: the next "
                      f"request is keyed {answer.route.key!r} and Kafka's partitioner picks"]
    rows = [["ORDER", "KEY", "PARTITION", "WORKER", "LOAD", "SLOTS", "PROFILE"]]
    for i, pref in enumerate(answer.order):
        rows.append([("home" if i == 0 else str(i)), pref.key, str(pref.partition),
                     pref.worker, str(pref.load), str(pref.slots),
                     "held" if pref.hot else "-"])
    route = answer.route
    return [head, "", *table(rows), "",
            f"next request: key {route.key!r} -> {route.topic} partition {route.partition} "
            f"(worker {route.worker}: {REASON_TEXT.get(route.reason, route.reason)})",
            "(from the workers' last statuses and a router with no traffic of its own: a "
            "gateway that sends this voice often balances it over more of its order)"]


def write(answer: msgspec.Struct, lines: list[str], *, as_json: bool, out: TextIO) -> None:
    if as_json:
        out.write(msgspec.json.encode(answer).decode() + "\n")
    else:
        out.write("\n".join(lines) + "\n")
