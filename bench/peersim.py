"""The peers bench's trace and cost model as an event simulation: routing rules compared in
seconds, where the real bench (bench/peers.py) takes half an hour of a quiet machine.

    peers.trace() + peers.slices(): the same voices (Zipf 1.1 over 1,000, seed 16), the same
        levels, each paced at load x NOMINAL_RPS on an absolute schedule, as Load.paced sends
    -> route: "least_conn" (nginx: the process with the fewest requests in flight, ties in
       turn) or "fleet" (consumers.fleet.FleetRouter, fed each process's status every
       STATUS_S of simulated time: its partitions, what runs and waits there, the voices its
       cache holds; its own requests counted from send to answer, as the bench's client does)
       or "ideal" (a yardstick no real router reaches: it knows every process's load and
       cache exactly; a voice no process holds goes to the least loaded, a held one to its
       least loaded holder unless that has `home_queue` or more waiting beyond its slots and
       some process has a slot free, where it moves; with `wait_ms` it instead waits at a
       full holder whose next call ends within wait_ms, and moves otherwise; with
       `moves_at` it moves only at that level (with wait_ms's budget there, else none) and
       waits for its holder at every other one: an oracle told which level item 3 measures;
       with a `placement`, a first sighting goes to the process it names when that has a
       slot free within the wait budget (now, without one): bench.hindsight searches that
       placement with the whole trace known, and tries one balanced by popularity; with
       `everywhere` = K, the K most popular voices (Zipf ranks 1-K) go to the least loaded
       process whoever holds them, so they end up held by every process, each build counted
       when it happens)
    -> PROCESSES processes x SLOTS slots: a free slot takes the queue whose oldest request is
       oldest; fleet workers take up to MAX_BATCH of that voice as one call, topped up from
       the other voices' queues, oldest first (VoiceBatcher mixing: the bench engine is a
       VoiceMixer; `mix=False` keeps a call to one voice), model servers one request a call;
       a call costs 250 ms + 50 ms an item (ENGINE)
    -> each call looks its voice up in the process's LRU of CACHE_ENTRIES profiles: a miss is
       a profile build, counted as a first sighting (no process held the voice before) or a
       move (another process did)
    -> per level: p50 / p99 of arrival to end of call (no transport: the real bench adds
       about 15 ms for Kafka and a few for nginx) and builds; builds over the levels up to
       110 %, as the bench counts them.

What it leaves out, and why the real bench still decides: the transport, CPU contention on
the bench machine (4 processes, the broker, the S3 server and the driver on 2 cores), status
lag beyond STATUS_S, and the store load a miss costs. Against the real full runs it gives
nginx's builds (834 against 832, 843 and 846 measured) and the first fleet router's with home
queue 0 (701 against 709); against the run of 2026-12-05 (docs/benchmarks.md, section 8) the
fleet's builds 489 against 510 and p99s within 15 ms up to 90 % load, 290 ms under at 110 %;
with voices mixed in a call and the bench waiting for its workers to join (2026-12-06), the
fleet's builds 490 against 488 and p99s 20-90 ms under the measured ones up to 200 %.
"""

from __future__ import annotations

import argparse
import functools
import heapq
import json
import math
from collections import OrderedDict, deque
from dataclasses import dataclass, field
from typing import Any

from bench.peers import (
    MAX_BATCH,
    NOMINAL_RPS,
    PROCESSES,
    SLOTS,
    TRACE_SEED,
    plan,
    slices,
    trace,
)
from bench.routing import least_conn_pick, simulated_status
from bench.stats import percentile
from bench.workload import voice_id
from consumers.fleet.router import COPY_SHARE, HOME_QUEUE, FleetRouter
from topics.fleet import MAX_HOT_VOICES

PARTITIONS = 12
CACHE_ENTRIES = 256
STATUS_S = 0.5
BASE_S, PER_ITEM_S = 0.250, 0.050
COUNTED_UP_TO = 1.1  # the bench counts builds over the levels both designs always run
DESIGNS = ("least_conn", "fleet", "ideal")


@dataclass
class _Process:
    running: int = 0
    waiting: int = 0
    queued: OrderedDict[str, deque[tuple[float, int]]] = field(default_factory=OrderedDict)
    cache: OrderedDict[str, None] = field(default_factory=OrderedDict)


class _Run:
    """One design over the trace: arrivals routed, calls started and ended in time order."""

    def __init__(self, design: str, levels: dict[int, str], router: FleetRouter | None,
                 mix: bool = True, ideal: int | None = None,
                 wait_ms: float | None = None, moves_at: str | None = None,
                 placement: dict[str, int] | None = None,
                 everywhere: frozenset[str] = frozenset()) -> None:
        self.batch_max = 1 if design == "least_conn" else MAX_BATCH
        self.ideal = ideal  # the ideal router's home queue; None: another design
        self.wait_s = None if wait_ms is None else wait_ms / 1000  # the ideal's wait budget
        self.moves_at = moves_at  # the one level where the ideal moves; waits elsewhere
        self.budget_there = self.wait_s or 0.0  # its wait budget at that level
        self.placement = placement or {}  # voice -> the process its first sighting prefers
        self.everywhere = everywhere  # voices the ideal sends to the least loaded, held or not
        self.mix = mix
        self.level_of = levels  # request index -> its level
        self.router = router
        self.procs = [_Process() for _ in range(PROCESSES)]
        self.owned = {w: [p for p in range(PARTITIONS) if p % PROCESSES == w]
                      for w in range(PROCESSES)}
        self.now = 0.0
        self.ends: list[tuple[float, int, list[tuple[float, int]]]] = []  # (end, w, items)
        self.latency: dict[int, float] = {}
        self.builds: dict[str, dict[str, int]] = {}
        self.ever: set[str] = set()  # voices some process built
        self.inflight = [0] * PROCESSES
        self.turn = 0  # least_conn's round-robin among ties
        self.next_status = 0.0

    def arrive(self, at: float, i: int, voice: str) -> None:
        self.end_calls(until=at)
        self.now = at
        w = self.route(i, voice)
        self.inflight[w] += 1
        proc = self.procs[w]
        proc.queued.setdefault(voice, deque()).append((at, i))
        proc.waiting += 1
        self.dispatch(w)

    def route(self, i: int, voice: str) -> int:
        if self.ideal is not None:
            if self.moves_at is not None:
                at_measured = self.level_of[i] == self.moves_at
                self.wait_s = self.budget_there if at_measured else math.inf
            return self.ideal_pick(voice, self.ideal)
        if self.router is None:  # nginx least_conn
            w = least_conn_pick(self.inflight, self.turn)
            self.turn = (w + 1) % PROCESSES
            return w
        if self.now >= self.next_status:
            self.publish()
            self.next_status = self.now + STATUS_S
        route = self.router.route(voice)
        self.router.sent(f"r{i}", route)
        return int(route.worker) if route.worker is not None else 0

    def ideal_pick(self, voice: str, home_queue: int) -> int:
        def least(among: list[int]) -> int:
            return min(among, key=lambda w: (self.inflight[w], w))
        anywhere = least(list(range(PROCESSES)))
        if voice in self.everywhere:
            return anywhere
        holders = [w for w, proc in enumerate(self.procs) if voice in proc.cache]
        if not holders:  # a first sighting builds wherever it goes
            chosen = self.placement.get(voice)
            if chosen is not None and self.slot_free_in(chosen) <= (self.wait_s or 0.0):
                return chosen
            return anywhere
        holder = least(holders)
        if self.inflight[anywhere] >= SLOTS:
            return holder  # no slot free anywhere: moving would only add a build
        if self.wait_s is not None:
            return holder if self.slot_free_in(holder) <= self.wait_s else anywhere
        return holder if self.inflight[holder] < SLOTS + home_queue else anywhere

    def slot_free_in(self, w: int) -> float:
        """Seconds until process w can start a call for a request sent now: 0 with a slot
        free; else until its first running call ends, when everything waiting there (up to
        a batch) starts with it: a mixing worker's next call takes them all."""
        if self.procs[w].running < SLOTS:
            return 0.0
        if self.procs[w].waiting >= self.batch_max:
            return math.inf  # the next call is full already
        return min(end for end, proc, _ in self.ends if proc == w) - self.now

    def end_calls(self, until: float = math.inf) -> None:
        while self.ends and self.ends[0][0] <= until:
            self.now, w, items = heapq.heappop(self.ends)
            self.procs[w].running -= 1
            for arrived, j in items:
                self.latency[j] = self.now - arrived
                self.inflight[w] -= 1
                if self.router is not None:
                    self.router.done(f"r{j}")
            self.dispatch(w)

    def dispatch(self, w: int) -> None:
        proc = self.procs[w]
        while proc.running < SLOTS and proc.waiting:
            items: list[tuple[float, int]] = []
            voices: list[str] = []
            while proc.queued and len(items) < self.batch_max and (self.mix or not voices):
                voice = min(proc.queued, key=lambda v: proc.queued[v][0][0])  # oldest first
                queue = proc.queued[voice]
                while queue and len(items) < self.batch_max:
                    items.append(queue.popleft())
                if not queue:
                    del proc.queued[voice]
                voices.append(voice)
            proc.waiting -= len(items)
            proc.running += 1
            for voice in voices:
                self.look_up(proc, voice, self.level_of[items[0][1]])
            heapq.heappush(self.ends, (self.now + BASE_S + PER_ITEM_S * len(items), w, items))

    def look_up(self, proc: _Process, voice: str, level: str) -> None:
        if voice in proc.cache:
            proc.cache.move_to_end(voice)
            return
        counts = self.builds.setdefault(level, {"first": 0, "moved": 0})
        counts["moved" if voice in self.ever else "first"] += 1
        self.ever.add(voice)
        proc.cache[voice] = None
        if len(proc.cache) > CACHE_ENTRIES:
            proc.cache.popitem(last=False)

    def publish(self) -> None:
        assert self.router is not None
        for w, proc in enumerate(self.procs):
            self.router.apply(simulated_status(
                w, partitions=self.owned[w], slots=SLOTS, running=proc.running,
                queued=proc.waiting, hot=list(reversed(proc.cache))[:MAX_HOT_VOICES],
                now_s=self.now, interval_s=STATUS_S))


@functools.lru_cache(maxsize=8)
def trace_voices(count: int, seed: int = TRACE_SEED) -> tuple[str, ...]:
    """The trace's voices alone, drawn once per (count, seed): making the trace's requests
    is most of a simulation's time, and bench.hindsight simulates one trace thousands of
    times."""
    return tuple(r.voice_id for r in trace(count, "sim", seed))


def simulate(design: str, *, quick: bool = False, max_load: float = 1.5,
             home_queue: int = HOME_QUEUE, balance: float = 1.25,
             copy_share: float = COPY_SHARE, mix: bool = True,
             wait_ms: float | None = None, moves_at: str | None = None,
             placement: dict[str, int] | None = None, everywhere: int = 0,
             seed: int = TRACE_SEED) -> dict[str, Any]:
    """Per level (load, requests, p50_ms, p99_ms, builds) and the counted builds; `seed`
    draws the trace's voices in another order (the recorded runs all used TRACE_SEED);
    `everywhere` the ideal router's K voices held by every process (module docstring)."""
    if design not in DESIGNS:
        raise ValueError(f"design must be one of {', '.join(DESIGNS)}, got {design!r}")
    if (wait_ms is not None or moves_at is not None or placement is not None
            or everywhere) and design != "ideal":
        raise ValueError("wait_ms, moves_at, placement and everywhere steer the ideal router: "
                         "design must be ideal")
    every = slices(plan(quick))  # the whole plan: the trace is cut the way the bench cuts it
    parts = [(name, load, count) for name, load, count in every
             if name != "kill" and (name == "warm" or load <= max_load)]
    if moves_at is not None and moves_at not in {name for name, _, _ in parts}:
        raise ValueError(f"moves_at must name a level of the run "
                         f"({', '.join(name for name, _, _ in parts)}), got {moves_at!r}")
    voices = trace_voices(sum(c for _, _, c in every), seed)
    clock = [0.0]
    router = FleetRouter(partitions=PARTITIONS, balance=balance, home_queue=home_queue,
                         copy_share=copy_share, clock=lambda: clock[0],
                         wall_ms=lambda: int(clock[0] * 1000)) if design == "fleet" else None
    schedule: list[tuple[float, str]] = []  # (arrival, level): paced, absolute
    start = 0.0
    for name, load, count in parts:
        rate = load * NOMINAL_RPS
        schedule += [(start + k / rate, name) for k in range(count)]
        start += count / rate
    run = _Run(design, {i: name for i, (_, name) in enumerate(schedule)}, router, mix,
               ideal=home_queue if design == "ideal" else None, wait_ms=wait_ms,
               moves_at=moves_at, placement=placement,
               everywhere=frozenset(voice_id(rank) for rank in range(everywhere)))
    for i, (at, _) in enumerate(schedule):
        clock[0] = at
        run.arrive(at, i, voices[i])
    run.end_calls()  # every answer awaited
    levels: list[dict[str, Any]] = []
    first = 0
    for name, load, count in parts:
        ms = [run.latency[j] * 1000 for j in range(first, first + count)]
        first += count
        levels.append({"level": name, "load": load, "requests": count,
                       "p50_ms": round(percentile(ms, 50), 1),
                       "p99_ms": round(percentile(ms, 99), 1),
                       **run.builds.get(name, {"first": 0, "moved": 0})})
    counted = [lv for lv in levels if lv["level"] != "warm" and lv["load"] <= COUNTED_UP_TO]
    return {"design": design, "home_queue": home_queue, "balance": balance,
            "copy_share": copy_share, "mix": mix, "wait_ms": wait_ms, "moves_at": moves_at,
            "everywhere": everywhere,
            "levels": levels,
            "builds": sum(lv["first"] + lv["moved"] for lv in counted),
            "first_sightings": sum(lv["first"] for lv in counted)}


FRONTIER_WAITS_MS = (0.0, 25.0, 50.0, 100.0, 150.0, 200.0, 300.0)
MEASURED_LEVEL = "load0.7"  # item 3's p99 is taken at 70 % load


def frontier(*, quick: bool = False, max_load: float = 1.5,
             waits_ms: tuple[float, ...] = FRONTIER_WAITS_MS) -> dict[str, Any]:
    """The ideal router at each wait budget beside least_conn: what any rule of the kind
    "wait at most W ms for a slot where the profile is, else build it where a slot is
    free" can reach on this trace, however well it knows the fleet; and, past that kind,
    the oracle that moves only at the measured level and waits at every other."""
    nginx = simulate("least_conn", quick=quick, max_load=max_load)
    rows = [simulate("ideal", quick=quick, max_load=max_load, wait_ms=w) for w in waits_ms]
    oracle = simulate("ideal", quick=quick, max_load=max_load, moves_at=MEASURED_LEVEL)
    return {"least_conn": nginx, "ideal": rows, "oracle": oracle}


def frontier_table(out: dict[str, Any]) -> str:
    nginx = out["least_conn"]
    shown = [lv["level"] for lv in nginx["levels"]
             if lv["level"] != "warm" and lv["load"] <= 1.0]
    loads = {lv["level"]: f"{lv['load']:.0%}" for lv in nginx["levels"]}
    head = ("| router | " + " | ".join(f"p99 at {loads[name]}" for name in shown)
            + " | builds | builds / least_conn |")
    lines = [head, "|" + "---|" * (len(shown) + 3)]

    def row(name: str, result: dict[str, Any]) -> str:
        p99 = {lv["level"]: lv["p99_ms"] for lv in result["levels"]}
        return (f"| {name} | " + " | ".join(f"{p99[level]:.0f}" for level in shown)
                + f" | {result['builds']} | {result['builds'] / nginx['builds']:.2f}x |")

    lines.append(row("least_conn (nginx)", nginx))
    for result in out["ideal"]:
        lines.append(row(f"ideal, wait <= {result['wait_ms']:.0f} ms", result))
    oracle = out["oracle"]
    lines.append(row(f"ideal, moves only at {loads[oracle['moves_at']]}", oracle))
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m bench.peersim",
        description="The peers bench's trace and cost model as an event simulation: p50/p99 "
                    "per load level and profile builds, least_conn against fleet routing (or "
                    "the ideal router).")
    parser.add_argument("--design", choices=DESIGNS, default="fleet",
                        help="ideal: exact loads and caches, first sightings placed freely, "
                             "a yardstick for what any router could do (module docstring)")
    parser.add_argument("--home-queue", type=int, default=HOME_QUEUE)
    parser.add_argument("--balance", type=float, default=1.25)
    parser.add_argument("--copy-share", type=float, default=COPY_SHARE)
    parser.add_argument("--max-load", type=float, default=1.5, help="highest level to offer")
    parser.add_argument("--quick", action="store_true", help="the quick run's plan")
    parser.add_argument("--one-voice-calls", action="store_true",
                        help="fleet calls hold one voice's requests (an engine that cannot "
                             "mix voices), not topped up from other voices")
    parser.add_argument("--wait-ms", type=float, default=None,
                        help="ideal only: wait at a full holder whose next call ends within "
                             "this many ms, move otherwise (instead of --home-queue)")
    parser.add_argument("--moves-at", default=None, metavar="LEVEL",
                        help="ideal only: move only at this level (e.g. load0.7; with "
                             "--wait-ms, that budget there) and wait at every other")
    parser.add_argument("--everywhere", type=int, default=0, metavar="K",
                        help="ideal only: the K most popular voices go to the least loaded "
                             "process, so every process comes to hold them (builds counted)")
    parser.add_argument("--frontier", action="store_true",
                        help="the ideal router over a sweep of wait budgets, and the oracle "
                             "that moves only at 70 %% load: p99 per level and builds against "
                             "least_conn's, as a markdown table")
    parser.add_argument("--json", action="store_true", help="print the result as JSON")
    args = parser.parse_args(argv)
    if (args.wait_ms is not None or args.moves_at is not None or args.everywhere) \
            and args.design != "ideal":
        parser.error("--wait-ms, --moves-at and --everywhere steer the ideal router: "
                     "add --design ideal")
    if args.everywhere < 0:
        parser.error(f"--everywhere must be 0 or more, got {args.everywhere}")
    if args.frontier:
        print(frontier_table(frontier(quick=args.quick, max_load=args.max_load)))
        return
    out = simulate(args.design, quick=args.quick, max_load=args.max_load,
                   home_queue=args.home_queue, balance=args.balance,
                   copy_share=args.copy_share, mix=not args.one_voice_calls,
                   wait_ms=args.wait_ms, moves_at=args.moves_at, everywhere=args.everywhere)
    if args.json:
        print(json.dumps(out, indent=2))
        return
    print(f"{out['design']}: builds {out['builds']} ({out['first_sightings']} first sightings)"
          f" over the levels up to {COUNTED_UP_TO:.0%}")
    for lv in out["levels"]:
        print(f"  {lv['level']:>8} {lv['load']:.0%}: p50 {lv['p50_ms']:7.1f} ms  "
              f"p99 {lv['p99_ms']:7.1f} ms  builds {lv['first']} first + {lv['moved']} moved")


if __name__ == "__main__":
    main()
