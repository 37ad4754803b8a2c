"""Cache locality: profile hit ratio per routing policy, 1,000 voices, Zipf(1.1), 4 workers.

Setup: the 1,000 voices are registered and their profiles stored (BenchContext.seed_profiles:
one computed through the real resolver, timed, and stored for every voice: they share one
reference, so their profiles differ only in voice_id) - the steady state of a factory whose
voices were registered before. One request trace: WARM + MEASURED voice draws from
ZipfSampler(1000, 1.1). Per policy, the trace is split into one sequence per worker:

- voice-keyed: four aiokafka consumers join a group on a fresh 12-partition copy of
  `tts.requests` with the worker's assignor and settle; each voice goes to the consumer that
  owns its murmur2 partition (`topics.partitioning.partition_for`), as a producer keyed by
  voice_id sends it.
- fleet-routed: what the gateway does now (consumers.fleet.FleetRouter with the run's
  VF_ROUTE_BALANCE, VF_ROUTE_HOME_QUEUE and VF_ROUTE_COPY_SHARE, over the same group's
  partition owners), in `routing.fleet_routed`'s event simulation of in-flight requests,
  with the workers' statuses every 0.5 s of it; routed once per LRU size, since a worker's
  status lists the voices its cache holds.
- least_conn / round-robin: `routing.least_conn` (nginx's rule over an event simulation of
  in-flight requests) and `routing.round_robin`; these cannot go through keyed partitioning.

Each worker is a real `ProfileResolver` with its own `ProfileCache(max_entries=N)` over the
real object store and the bench engine, fed its sequence in order in its own thread (the
order within a worker is what an LRU sees). The two event simulations also give each
request's wait for a slot (in mean service times, over the measured part):
`cache_wait_{mean,p99}_{fleet_routed,least_conn}`, what routing for the cache costs callers
in that model. Counted over the MEASURED part only, from the
resolver's `on_lookup` results: RAM hits, store loads, computes; the time spent in
non-hit lookups is measured. "Profile builds" are RAM misses: each one puts a profile on
the device, from the store when it is there (here: always) or by computing it.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from bench import routing
from bench.assignors import _settle
from bench.harness import BenchContext
from bench.outcome import Outcome, md_table
from bench.scratch import scratch_topics
from bench.stats import percentile
from bench.workload import voice_id, zipf_voices
from consumers.kafka import assignors, make_consumer
from consumers.settings import Settings
from consumers.wiring import make_store
from pipeline.engines import create_engine
from pipeline.profiles import ProfileCache
from pipeline.voices import ProfileResolver
from topics.specs import REQUESTS

N_VOICES = 1000
ZIPF_S = 1.1
WORKERS = 4
SIZES = (256, 64)
POLICIES = ("fleet_routed", "voice_keyed", "least_conn", "round_robin")


async def kafka_owners(settings: Settings) -> dict[int, int]:
    """Partition -> worker index, from a real group of WORKERS consumers on the broker."""
    async with scratch_topics(settings.kafka, f"bench-cache-{uuid.uuid4().hex[:6]}.",
                              (REQUESTS,)) as prefix:
        return await _owners(settings, prefix)


async def _owners(settings: Settings, prefix: str) -> dict[int, int]:
    members = {f"w{i}": make_consumer(
        settings.kafka, prefix + REQUESTS.name, group_id=f"{prefix}group",
        enable_auto_commit=False, partition_assignment_strategy=assignors(settings.worker.assignor),
        session_timeout_ms=10_000, heartbeat_interval_ms=1000) for i in range(WORKERS)}
    for consumer in members.values():
        await consumer.start()
    try:
        owned = await _settle(members, REQUESTS.partitions)
    finally:
        for consumer in members.values():
            await consumer.stop()
    return {p: int(name[1:]) for p, name in owned.items()}


def _drive(ctx: BenchContext, trace: list[str], routes: list[int], capacity: int,
           warm: int) -> dict[str, Any]:
    store = make_store(ctx.base.store)
    engine = create_engine("bench")
    encoder = ctx.encoder()
    counts = [{"hit": 0, "store": 0, "miss": 0} for _ in range(WORKERS)]
    slow_s = [0.0] * WORKERS  # seconds spent in lookups that were not RAM hits
    per_worker: list[list[tuple[int, str]]] = [[] for _ in range(WORKERS)]
    for i, (v, w) in enumerate(zip(trace, routes, strict=True)):
        per_worker[w].append((i, v))

    def serve(w: int) -> None:
        seen: list[str] = []
        resolver = ProfileResolver(store=store, engine=engine,
                                   cache=ProfileCache(max_entries=capacity),
                                   encoder=encoder, on_lookup=seen.append)
        for i, v in per_worker[w]:
            t0 = time.perf_counter()
            resolver.resolve(v)
            result = seen.pop()
            if i >= warm:
                counts[w][result] += 1
                if result != "hit":
                    slow_s[w] += time.perf_counter() - t0

    with ThreadPoolExecutor(WORKERS) as pool:
        list(pool.map(serve, range(WORKERS)))
    total = {k: sum(c[k] for c in counts) for k in ("hit", "store", "miss")}
    lookups = sum(total.values())
    return {"hit_ratio": round(total["hit"] / lookups, 4), "builds": total["store"] +
            total["miss"], "store_loads": total["store"], "computed": total["miss"],
            "slow_s": round(sum(slow_s), 2),
            "requests_per_worker": [sum(1 for i, _ in seq if i >= warm) for seq in per_worker]}


async def run(ctx: BenchContext) -> Outcome:
    warm, measured = ctx.pick((12_000, 8_000), (50_000, 100_000))
    voices = [voice_id(i) for i in range(N_VOICES)]
    await asyncio.to_thread(ctx.register, voices)
    compute_s = ctx.profile_compute_s or 0.0
    trace = zipf_voices(warm + measured, N_VOICES, ZIPF_S, seed=11)
    owners = await kafka_owners(ctx.base)
    waits: dict[str, list[float]] = {"fleet_routed": [], "least_conn": []}
    routes = {"voice_keyed": routing.voice_keyed(trace, owners, REQUESTS.partitions),
              "least_conn": routing.least_conn(len(trace), WORKERS, seed=11,
                                               waits=waits["least_conn"]),
              "round_robin": routing.round_robin(len(trace), WORKERS)}
    fleet = {size: routing.fleet_routed(
        trace, owners, REQUESTS.partitions, seed=11, hot_entries=size,
        balance=ctx.base.routing.balance, home_queue=ctx.base.routing.home_queue,
        copy_share=ctx.base.routing.copy_share,
        waits=waits["fleet_routed"] if size == SIZES[0] else None) for size in SIZES}
    rows: list[dict[str, Any]] = []
    for size in SIZES:
        for policy in POLICIES:
            chosen = fleet[size] if policy == "fleet_routed" else routes[policy]
            row = await asyncio.to_thread(_drive, ctx, trace, chosen, size, warm)
            row.update(policy=policy, capacity=size,
                       compute_equiv_s=round(row["builds"] * compute_s, 1))
            rows.append(row)
    table = md_table(
        ["LRU per worker", "routing", "hit ratio", "profile builds (RAM misses)",
         "of which computed", "seconds in those lookups (store loads, measured)",
         f"if each build were computed ({compute_s:.2f} s each)", "requests per worker"],
        [[r["capacity"], r["policy"], f"{r['hit_ratio']:.4f}", r["builds"], r["computed"],
          r["slow_s"], r["compute_equiv_s"], " / ".join(map(str, r["requests_per_worker"]))]
         for r in rows])
    voices_per_worker = [sum(1 for v in voices if routing.voice_keyed([v], owners,
                                                                       REQUESTS.partitions)[0] == w)
                         for w in range(WORKERS)]
    figures: dict[str, float | int | None] = {}
    for r in rows:
        suffix = "" if r["capacity"] == 256 else f"_lru{r['capacity']}"
        figures[f"cache_hit_ratio_{r['policy']}{suffix}"] = r["hit_ratio"]
        figures[f"cache_builds_{r['policy']}{suffix}"] = r["builds"]
    figures["cache_profile_compute_s"] = round(compute_s, 3)
    for policy, got in waits.items():
        measured_waits = got[warm:]
        figures[f"cache_wait_mean_{policy}"] = round(sum(measured_waits) / len(measured_waits), 3)
        figures[f"cache_wait_p99_{policy}"] = round(percentile(measured_waits, 99), 3)
    notes = [f"{warm:,} warm-up + {measured:,} measured requests; voices owned per worker "
             f"under voice-keyed routing: {voices_per_worker} (partition owners {owners})",
             "wait for a slot in the event simulations, mean / p99 in mean service times: "
             + "; ".join(f"{p} {figures[f'cache_wait_mean_{p}']} / "
                         f"{figures[f'cache_wait_p99_{p}']}" for p in waits)
             + f" (fleet routing: balance {ctx.base.routing.balance}, home queue "
               f"{ctx.base.routing.home_queue}, copy share {ctx.base.routing.copy_share})"]
    return Outcome("cache", figures, table, series={"rows": rows}, notes=notes)


def plot(series: dict[str, Any], ax: Any) -> None:
    rows = series["rows"]
    width = 0.2
    for j, policy in enumerate(POLICIES):
        values = [next(r["hit_ratio"] for r in rows if r["policy"] == policy and
                       r["capacity"] == size) for size in SIZES]
        xs = [i + (j - (len(POLICIES) - 1) / 2) * width for i in range(len(SIZES))]
        ax.bar(xs, values, width, label=policy.replace("_", " "))
        for x, v in zip(xs, values, strict=True):
            ax.text(x, v + 0.01, f"{v:.3f}", ha="center", fontsize=8)
    ax.axhline(0.99, color="grey", ls=":", label="target 0.99 (voice-keyed, 256)")
    ax.set_xticks(range(len(SIZES)), [f"LRU {s} per worker" for s in SIZES])
    ax.set_ylim(0, 1.08)
    ax.set_ylabel("profile cache hit ratio")
    ax.set_title(f"{N_VOICES} voices, Zipf({ZIPF_S}), {WORKERS} workers")
    ax.legend(loc="lower left", fontsize=8)
