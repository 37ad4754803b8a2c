"""`voicefactory bench route`: one narrator, one brand voice and a kill -9, under fleet routing.

Engine: the peers cost model (bench.peers): 250 ms + 50 ms an item a batch call, max_inflight
2, max_batch 8; a stream's first chunk at 250 ms, then 50 ms per second of audio (a ~1.2-s
clip: ~285 ms a call). Nominal capacity of 4 workers: 8 slots at one 300-ms call, 26.7 req/s.

1. One narrator: a LINES-line job, one voice, sent as `job run` sends it (RoutedSender,
   VF_ROUTE_JOB_BALANCE) -> on 1 worker, then on 4 -> time from the first send to the last
   result; answers per worker from the results' `worker`; profile builds per worker (RAM
   misses from each worker's /metrics; the profile is stored beforehand, as after any
   first use). Then the same lines on the 4 keyed by voice_id to tts.requests, as an
   external producer sends them: one partition's owner takes them all and spills what its
   queue cannot hold (consumers/worker/spill.py; vf_spilled_total from /metrics).
2. One brand voice, streamed as the gateway sends it: the gateway's own `Gateway` object in
   this process (routing, reply partition, failover), requests as `parse_speech` builds
   them -> idle: IDLE requests one after another -> loaded: BRAND_LOAD x nominal, open loop
   -> per request produce -> first chunk read (the gateway's reply queue) and the worker
   that answered (tts.results).
3. Kill: the same load for KILL_S s, one of the 4 workers killed -9 after KILL_AT_S s (static
   membership: its partitions wait for the 10-s session timeout) -> first chunk p99 over the
   run, requests never finished (lost), results for a request beyond its first (duplicates,
   absorbed by request_id downstream), failovers the gateway made.
"""

from __future__ import annotations

import asyncio
import os
import signal
import time
import urllib.request
import uuid
from collections import Counter
from typing import Any

from bench.harness import BenchContext, Load
from bench.nginx import free_port
from bench.outcome import Outcome, md_table
from bench.peerload import open_loop, profile_counts, spilled_count
from bench.processes import WorkerProcess
from bench.readers import ResultLog
from bench.stats import percentile
from bench.workload import bench_text
from consumers.gateway.keys import KeyRing
from consumers.gateway.runtime import Gateway
from consumers.gateway.speech import REQUEST_RATE
from consumers.settings import Settings
from consumers.wiring import make_store
from topics.events import SynthesisRequest

PROCESSES = 4
SLOTS = 2
MAX_BATCH = 8
ENGINE = {"VF_BENCH_BASE_MS": "250", "VF_BENCH_PER_ITEM_MS": "50",
          "VF_BENCH_FIRST_CHUNK_MS": "250", "VF_BENCH_PER_AUDIO_SECOND_MS": "50"}
NOMINAL_RPS = PROCESSES * SLOTS / 0.300
BRAND_LOAD = 0.7
NARRATOR = "route-narrator"
BRAND = "route-brand"


def plan(quick: bool) -> dict[str, Any]:
    return {"lines": 300 if quick else 1000, "idle": 15 if quick else 40,
            "brand_s": 10.0 if quick else 40.0, "kill_s": 15.0 if quick else 40.0,
            "kill_at_s": 4.0 if quick else 10.0}


def _scrape(port: int) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as r:
        return str(r.read().decode())


async def _counts(ports: list[int]) -> tuple[list[int], int]:
    """Profile builds per worker (RAM misses) and records spilled by all, one scrape each."""
    texts = await asyncio.gather(*(asyncio.to_thread(_scrape, p) for p in ports))
    builds = [int(c["store"] + c["miss"]) for c in map(profile_counts, texts)]
    return builds, sum(map(spilled_count, texts))


class Fleet:
    """`n` worker processes on fresh topics, each with its /metrics port."""

    def __init__(self, ctx: BenchContext, s: Settings, n: int, tag: str) -> None:
        self.settings = s
        self.ports = [free_port() for _ in range(n)]
        run = s.kafka.topic_prefix.rstrip(".")  # each run's logs apart, to read afterwards
        self.workers = [WorkerProcess(s, ctx.work_dir / f"{run}-{tag}{i}.log",
                                      env={**ENGINE, "VF_METRICS_PORT": str(port),
                                           "VF_INSTANCE_ID": f"{s.kafka.topic_prefix}w{i}"})
                        for i, port in enumerate(self.ports)]

    async def ready(self) -> None:
        await asyncio.gather(*(w.wait_log("assigned partitions", 300) for w in self.workers))
        await asyncio.sleep(2 * self.settings.routing.fleet_interval_ms / 1000)  # statuses in

    async def stop(self) -> None:
        await asyncio.gather(*(w.stop() for w in self.workers), return_exceptions=True)


async def narrator(fleet: Fleet, lines: int, tag: str, *, routed: bool = True,
                   ) -> dict[str, Any]:
    """`routed`: as `job run` sends; else keyed by voice_id to tts.requests, as an external
    producer sends (one partition, one owner: what it does not keep it spills)."""
    s = fleet.settings
    job = [SynthesisRequest(request_id=f"nar-{tag}-{i:05d}", voice_id=NARRATOR,
                            text=bench_text(i), language="en") for i in range(lines)]
    before, spilled = await _counts(fleet.ports)
    async with Load(s, routed=routed, balance=s.routing.job_balance) as load, \
            ResultLog(s) as results:
        t0 = time.time()
        await load.burst(job)
        missing = await results.wait_for({r.request_id for r in job}, 600)
        # The log reads the topic from its start: an earlier narrator's lines are in it.
        ours = [results.first[r.request_id] for r in job if r.request_id in results.first]
        t1 = max(t for t, _ in ours)
        per_worker = Counter(r.worker for _, r in ours)
    after, moved = await _counts(fleet.ports)
    return {"lines": lines, "seconds": round(t1 - t0, 2), "missing": len(missing),
            "per_worker": dict(sorted(per_worker.items())),
            "builds_per_worker": [a - b for a, b in zip(after, before, strict=True)],
            "spilled": moved - spilled}


def _brand_request(rid: str, i: int) -> SynthesisRequest:
    """What `parse_speech` makes of an OpenAI speech call in the brand voice."""
    return SynthesisRequest(request_id=rid, voice_id=BRAND, text=bench_text(i), format="wav",
                            sample_rate=REQUEST_RATE, stream=True, language="en",
                            metadata={"model": "tts-1", "tenant": "bench"})


class Callers:
    """Speech requests through an in-process Gateway: first chunk and end of each."""

    def __init__(self, gw: Gateway) -> None:
        self.gw = gw
        self.sent: dict[str, float] = {}
        self.first: dict[str, float] = {}
        self.ended: dict[str, str] = {}  # request_id -> final status

    async def one(self, request: SynthesisRequest, timeout_s: float = 120.0) -> None:
        gw, rid = self.gw, request.request_id
        partition = gw.router.register([rid])
        self.sent[rid] = time.monotonic()
        try:
            await gw.produce(gw.names.requests_interactive, [request], partition)
            queue = gw.router.queue(rid)
            deadline = time.monotonic() + timeout_s
            while rid not in self.ended and time.monotonic() < deadline:
                chunk = await asyncio.wait_for(queue.get(), deadline - time.monotonic())
                if chunk.data and rid not in self.first:
                    self.first[rid] = time.monotonic()
                if chunk.final:
                    self.ended[rid] = chunk.status or "failed"
        except (TimeoutError, Exception):  # noqa: S110 - counted as lost below
            pass
        finally:
            gw.finished([rid])
            gw.router.unregister([rid])

    async def paced(self, requests: list[SynthesisRequest], rate: float) -> None:
        await open_loop(requests, rate, self.one)

    def first_ms(self, ids: list[str]) -> list[float]:
        return [(self.first[r] - self.sent[r]) * 1000 for r in ids if r in self.first]


def _pct(values: list[float], q: float) -> float | None:
    return round(percentile(values, q), 1) if values else None


async def brand(ctx: BenchContext, fleet: Fleet, p: dict[str, Any],
                tag: str) -> dict[str, Any]:
    s = fleet.settings.with_overrides(  # reply partitions: a group of this run's own
        gateway={"group_id": f"{fleet.settings.kafka.topic_prefix}gateway"})
    gw = Gateway(s, store=make_store(s.store), keyring=KeyRing(ctx.work_dir / "no-keys"))
    await gw.start()
    try:
        async with ResultLog(s) as results:
            deadline = time.monotonic() + 60
            while not gw.router.partitions and time.monotonic() < deadline:  # noqa: ASYNC110
                await asyncio.sleep(0.1)  # the reply partitions: a group join, polled
            callers = Callers(gw)
            idle = [_brand_request(f"idle-{tag}-{i}", i) for i in range(p["idle"])]
            for request in idle:
                await callers.one(request)
            rate = BRAND_LOAD * NOMINAL_RPS
            loaded = [_brand_request(f"brand-{tag}-{i}", i)
                      for i in range(round(rate * p["brand_s"]))]
            await callers.paced(loaded, rate)
            await results.wait_for({r.request_id for r in loaded}, 30)
            shares = Counter(results.first[r.request_id][1].worker for r in loaded
                             if r.request_id in results.first)
            out: dict[str, Any] = {
                "idle": callers.first_ms([r.request_id for r in idle]),
                "loaded": callers.first_ms([r.request_id for r in loaded]),
                "loaded_sent": len(loaded),
                "shares": {w: round(n / len(loaded), 3) for w, n in sorted(shares.items())}}
            kills = [_brand_request(f"kill-{tag}-{i}", i)
                     for i in range(round(rate * p["kill_s"]))]

            killed_at: list[float] = []

            async def kill_later() -> None:
                await asyncio.sleep(p["kill_at_s"])
                os.kill(fleet.workers[0].pid, signal.SIGKILL)
                killed_at.append(time.monotonic())

            failovers_before = gw.failover.failovers if gw.failover else 0
            await asyncio.gather(callers.paced(kills, rate), kill_later())
            ids = [r.request_id for r in kills]
            await results.wait_for(set(ids), 60)
            # The killed worker's records come again once its partitions move (the session
            # timeout); their answers are the duplicates, counted once they are in.
            settle = killed_at[0] + s.worker.session_timeout_ms / 1000 + 10 - time.monotonic()
            await asyncio.sleep(max(0.0, settle))
            arrivals = Counter(r.request_id for _, r in results.arrivals)
            out.update({
                "kill": callers.first_ms(ids), "kill_sent": len(kills),
                "kill_lost": sum(1 for r in ids if callers.ended.get(r) != "succeeded"),
                "kill_duplicates": sum(max(0, arrivals[r] - 1) for r in ids),
                "kill_failovers": (gw.failover.failovers if gw.failover else 0)
                - failovers_before})
            return out
    finally:
        await gw.stop()


async def run(ctx: BenchContext) -> Outcome:
    p = plan(ctx.quick)
    await asyncio.to_thread(ctx.register, [NARRATOR, BRAND])
    tag = uuid.uuid4().hex[:6]
    one = Fleet(ctx, await ctx.settings("route-one", max_inflight=SLOTS, max_batch=MAX_BATCH),
                1, "one")
    try:
        await one.ready()
        solo = await narrator(one, p["lines"], f"{tag}a")
    finally:
        await one.stop()
    four = Fleet(ctx, await ctx.settings("route-four", max_inflight=SLOTS,
                                         max_batch=MAX_BATCH), PROCESSES, "four")
    try:
        await four.ready()
        spread = await narrator(four, p["lines"], f"{tag}b")
        plain = await narrator(four, p["lines"], f"{tag}c", routed=False)
        callers = await brand(ctx, four, p, tag)
    finally:
        await four.stop()
    return outcome(solo, spread, callers, plain)


def outcome(solo: dict[str, Any], spread: dict[str, Any],
            callers: dict[str, Any], plain: dict[str, Any]) -> Outcome:
    idle50 = _pct(callers["idle"], 50)
    loaded99 = _pct(callers["loaded"], 99)
    shares = callers["shares"]
    figures: dict[str, float | int | None] = {
        "route_narrator_lines": solo["lines"],
        "route_narrator_1_worker_s": solo["seconds"],
        "route_narrator_4_workers_s": spread["seconds"],
        "route_narrator_speedup": round(solo["seconds"] / spread["seconds"], 2)
        if spread["seconds"] else None,
        "route_narrator_workers_used": sum(1 for n in spread["per_worker"].values() if n),
        "route_narrator_max_builds_per_worker": max(spread["builds_per_worker"]),
        "route_narrator_missing": solo["missing"] + spread["missing"] + plain["missing"],
        "route_plain_narrator_4_workers_s": plain["seconds"],
        "route_plain_narrator_speedup": round(solo["seconds"] / plain["seconds"], 2)
        if plain["seconds"] else None,
        "route_plain_narrator_workers_used": sum(1 for n in plain["per_worker"].values() if n),
        "route_plain_narrator_spilled": plain["spilled"],
        "route_plain_narrator_max_builds_per_worker": max(plain["builds_per_worker"]),
        "route_brand_rps": round(BRAND_LOAD * NOMINAL_RPS, 1),
        "route_brand_idle_first_chunk_p50_ms": idle50,
        "route_brand_idle_first_chunk_p99_ms": _pct(callers["idle"], 99),
        "route_brand_first_chunk_p50_ms": _pct(callers["loaded"], 50),
        "route_brand_first_chunk_p99_ms": loaded99,
        "route_brand_p99_over_idle": round(loaded99 / idle50, 2)
        if loaded99 and idle50 else None,
        "route_brand_min_worker_share": min(shares.values()) if len(shares) == PROCESSES
        else 0.0,
        "route_brand_unanswered": callers["loaded_sent"] - len(callers["loaded"]),
        "route_kill_first_chunk_p99_ms": _pct(callers["kill"], 99),
        "route_kill_first_chunk_max_ms": round(max(callers["kill"]), 1)
        if callers["kill"] else None,
        "route_kill_lost": callers["kill_lost"],
        "route_kill_duplicates": callers["kill_duplicates"],
        "route_kill_failovers": callers["kill_failovers"]}
    table = md_table(
        ["measurement", "figure"],
        [["one narrator, 1 worker (s)", solo["seconds"]],
         ["one narrator, 4 workers (s)", spread["seconds"]],
         ["speedup", figures["route_narrator_speedup"]],
         ["answers per worker (4)", " / ".join(str(n) for n in spread["per_worker"].values())],
         ["profile builds per worker (4)", " / ".join(map(str, spread["builds_per_worker"]))],
         ["the same lines keyed by voice_id (an external producer), 4 workers (s)",
          plain["seconds"]],
         ["  speedup / spilled by the partition's owner",
          f"{figures['route_plain_narrator_speedup']} / {plain['spilled']}"],
         ["  answers / profile builds per worker (4)",
          " / ".join(str(n) for n in plain["per_worker"].values()) + "; "
          + " / ".join(map(str, plain["builds_per_worker"]))],
         ["brand voice: idle first chunk p50 / p99 (ms)",
          f"{idle50} / {figures['route_brand_idle_first_chunk_p99_ms']}"],
         [f"brand voice at {BRAND_LOAD:.0%}: first chunk p50 / p99 (ms)",
          f"{figures['route_brand_first_chunk_p50_ms']} / {loaded99}"],
         ["p99 / idle p50", figures["route_brand_p99_over_idle"]],
         ["share per worker", " / ".join(f"{v:.1%}" for v in shares.values())],
         ["kill -9 of 1 of 4: first chunk p99 / max (ms)",
          f"{figures['route_kill_first_chunk_p99_ms']} / "
          f"{figures['route_kill_first_chunk_max_ms']}"],
         ["kill: lost / duplicates / failovers",
          f"{callers['kill_lost']} of {callers['kill_sent']} / "
          f"{callers['kill_duplicates']} / {callers['kill_failovers']}"]])
    notes = [f"engine {ENGINE}; nominal {NOMINAL_RPS:.1f} req/s for {PROCESSES} workers "
             f"x {SLOTS} slots; brand load {BRAND_LOAD:.0%}",
             "one narrator is sent as `job run` routes it (VF_ROUTE_JOB_BALANCE); the brand "
             "voice through the gateway's Gateway object (VF_ROUTE_BALANCE, failover on)"]
    series = {"idle": callers["idle"], "loaded": callers["loaded"], "kill": callers["kill"]}
    return Outcome("route", figures, table, series=series, notes=notes)


def plot(series: dict[str, Any], ax: Any) -> None:
    for name in ("idle", "loaded", "kill"):
        values = sorted(series[name])
        if values:
            ax.plot(values, [i / len(values) for i in range(len(values))], label=name)
    ax.set_xscale("log")
    ax.set_xlabel("first chunk (ms)")
    ax.set_ylabel("fraction of requests")
    ax.set_title("One brand voice on 4 workers: idle, 70 % load, one worker killed -9")
    ax.legend(fontsize=8)
