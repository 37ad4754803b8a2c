"""Batching: throughput of one worker at max_batch 1, 2, 4, 8, 16 with a saturated queue.

Per max_batch: fresh topics -> a backlog of requests over VOICES voices produced up front
(enough for the whole step, so the queue never runs dry) -> one in-process worker (bench
engine: 200 ms + 25 ms per item a call, the default max_inflight 2, a local queue of
QUEUE requests so that a voice's lane can fill a batch of 16) -> after the first answers,
throughput = requests finished over the step / its length, mean batch = engine items /
engine calls over the same window. Gain = throughput / throughput at max_batch 1; the cost
model's ideal at 8 is (8 / 400 ms) / (1 / 225 ms) = 4.5x.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from bench.harness import BenchContext, Load
from bench.outcome import Outcome, md_table
from bench.processes import InProcessWorker
from bench.workload import requests

SIZES = (1, 2, 4, 8, 16)
BASE_MS, PER_ITEM_MS = 200.0, 25.0
VOICES = [f"voice-{i:04d}" for i in range(24)]
QUEUE = 256
ENGINE = {"VF_BENCH_BASE_MS": str(BASE_MS), "VF_BENCH_PER_ITEM_MS": str(PER_ITEM_MS)}


def ideal_rps(max_batch: int, inflight: int = 2) -> float:
    return inflight * max_batch / ((BASE_MS + PER_ITEM_MS * max_batch) / 1000)


async def _one(ctx: BenchContext, max_batch: int, seconds: float) -> dict[str, Any]:
    # drain_seconds: what is queued at the end is not measured, so stopping need not wait.
    s = await ctx.settings(f"batch{max_batch}", engine="bench", max_batch=max_batch,
                           queue_capacity=QUEUE, drain_seconds=2)
    # Until every voice had its first batch (its profile built) nothing is measured.
    warm_s = len(VOICES) * (BASE_MS + PER_ITEM_MS * max_batch) / 1000 / 2
    backlog = int(ideal_rps(max_batch) * (seconds + warm_s + 4)) + QUEUE
    async with Load(s) as load:
        await load.burst(requests(backlog, VOICES, prefix=f"mb{max_batch}"))
    running = InProcessWorker(s, ENGINE)
    engine: Any = running.runtime.engine
    running.start()
    try:
        deadline = time.monotonic() + 120
        while engine.calls < len(VOICES):  # every voice served once: steady state
            if time.monotonic() > deadline:
                raise TimeoutError(f"batching: no answers at max_batch {max_batch}")
            await asyncio.sleep(0.05)
        done0, calls0, items0 = running.worker.processed, engine.calls, engine.items
        t0 = time.monotonic()
        await asyncio.sleep(seconds)
        elapsed = time.monotonic() - t0
        done, calls, items = (running.worker.processed - done0, engine.calls - calls0,
                              engine.items - items0)
    finally:
        await running.stop()
    if done >= backlog - done0:
        raise RuntimeError(f"batching: the backlog ran out at max_batch {max_batch}")
    return {"max_batch": max_batch, "rps": round(done / elapsed, 2),
            "mean_batch": round(items / calls, 2) if calls else 0.0,
            "ideal_rps": round(ideal_rps(max_batch), 2)}


async def run(ctx: BenchContext) -> Outcome:
    seconds = ctx.pick(6.0, 30.0)
    ctx.register(VOICES)
    rows = [await _one(ctx, size, seconds) for size in SIZES]
    base = rows[0]["rps"] or 1.0
    for row in rows:
        row["gain"] = round(row["rps"] / base, 2)
        row["ideal_gain"] = round(row["ideal_rps"] / rows[0]["ideal_rps"], 2)
    by = {r["max_batch"]: r for r in rows}
    table = md_table(["max_batch", "throughput req/s", "mean batch formed", "gain vs 1",
                      "ideal gain (cost model)"],
                     [[r["max_batch"], r["rps"], r["mean_batch"], f"{r['gain']:.2f}x",
                       f"{r['ideal_gain']:.2f}x"] for r in rows])
    figures: dict[str, float | int | None] = {"batching_gain_at_8": by[8]["gain"]}
    figures.update({f"batching_rps_at_{r['max_batch']}": r["rps"] for r in rows})
    figures["batching_mean_batch_at_8"] = by[8]["mean_batch"]
    return Outcome("batching", figures, table, series={"rows": rows})


def plot(series: dict[str, Any], ax: Any) -> None:
    rows = series["rows"]
    xs = [r["max_batch"] for r in rows]
    ax.plot(xs, [r["rps"] for r in rows], "o-", label="measured")
    ax.plot(xs, [r["ideal_rps"] for r in rows], "k--", label="cost model (ideal)")
    for r in rows:
        ax.annotate(f"batch {r['mean_batch']:.1f}", (r["max_batch"], r["rps"]),
                    textcoords="offset points", xytext=(4, -12), fontsize=8)
    ax.set_xscale("log", base=2)
    ax.set_xticks(xs, [str(x) for x in xs])
    ax.set_xlabel("max_batch")
    ax.set_ylabel("requests / s")
    ax.set_title(f"Batching: engine {BASE_MS:.0f} ms + {PER_ITEM_MS:.0f} ms/item, "
                 f"max_inflight 2")
    ax.legend()
