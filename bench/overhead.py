"""Overhead: what the pipeline adds to the engine's time, per request, at a steady 50 req/s.

One worker subprocess (bench engine, base 10 ms a call) -> warm-up (every voice once) ->
requests paced at 50/s for the duration -> each answer's arrival time minus its send time is
the end-to-end latency; minus `timings_ms.synthesis` it is the overhead. By stage: queued
(send -> batch start: Kafka hop, fetch, batch wait), profile, encode, upload (put + presign),
and publish (worker done -> answer read back; total excludes it). Three rows from the same
run: 50 req/s with the default `batch_wait_ms` (10) and with 0 (a lone request waits out the
batch window before it starts), and 10 req/s (a rate one worker here sustains: the overhead
without queueing).
"""

from __future__ import annotations

from typing import Any

from bench.harness import BenchContext, Load, warm
from bench.outcome import Outcome, md_table
from bench.processes import WorkerProcess
from bench.readers import ResultLog
from bench.stats import summary
from bench.workload import requests

RATE = 50.0
LIGHT_RATE = 10.0  # a rate the worker sustains here: overhead without queueing
VOICES = [f"voice-{i:04d}" for i in range(50)]
STAGES = ("queued", "profile", "encode", "upload", "publish")
ENGINE = {"VF_BENCH_BASE_MS": "10"}


async def _row(ctx: BenchContext, rate: float, batch_wait_ms: int,
               duration_s: float) -> dict[str, Any]:
    s = await ctx.settings(f"overhead{batch_wait_ms}", engine="bench",
                           batch_wait_ms=batch_wait_ms)
    worker = WorkerProcess(s, ctx.work_dir / f"overhead-{rate:.0f}-{batch_wait_ms}.log",
                           env=ENGINE)
    try:
        async with Load(s) as load, ResultLog(s) as results:
            await worker.wait_log("assigned partitions", 120)
            await warm(ctx, s, VOICES, load, results)
            batch = requests(int(rate * duration_s), VOICES, prefix="oh")
            await load.paced(batch, rate)
            missing = await results.wait_for({r.request_id for r in batch}, 300)
            if missing:
                raise RuntimeError(f"overhead: {len(missing)} requests unanswered")
    finally:
        await worker.stop()
    overhead: list[float] = []
    e2e: list[float] = []
    by_stage: dict[str, list[float]] = {k: [] for k in STAGES}
    for r in batch:
        arrived, result = results.first[r.request_id]
        if result.status != "succeeded":
            raise RuntimeError(f"overhead: {r.request_id} {result.status}: {result.error}")
        latency = (arrived - load.sent[r.request_id]) * 1000
        t = result.timings_ms
        e2e.append(latency)
        overhead.append(latency - t.get("synthesis", 0.0))
        for stage in ("queued", "profile", "encode", "upload"):
            by_stage[stage].append(t.get(stage, 0.0))
        by_stage["publish"].append(max(0.0, latency - t.get("total", 0.0)))
    return {"rate": rate, "batch_wait_ms": batch_wait_ms, "n": len(batch), "overhead": overhead,
            "e2e": e2e, "stages": by_stage}


async def run(ctx: BenchContext) -> Outcome:
    duration = ctx.pick(8.0, 60.0)
    ctx.register(VOICES)
    rows = [await _row(ctx, RATE, 10, duration), await _row(ctx, RATE, 0, duration),
            await _row(ctx, LIGHT_RATE, 10, duration)]
    table_rows = []
    for row in rows:
        o = summary(row["overhead"])
        st = {k: summary(v) for k, v in row["stages"].items()}
        table_rows.append([row["rate"], row["batch_wait_ms"], row["n"], o["p50"], o["p95"],
                           o["p99"],
                           *(f"{st[k]['p50']:.1f} / {st[k]['p99']:.1f}" for k in STAGES)])
    main = summary(rows[0]["overhead"])
    zero = summary(rows[1]["overhead"])
    light = summary(rows[2]["overhead"])
    table = md_table(["req/s", "batch_wait_ms", "requests", "overhead p50 ms", "p95", "p99",
                      *(f"{k} p50 / p99" for k in STAGES)], table_rows)
    return Outcome("overhead", {
        "overhead_p50_ms": main["p50"], "overhead_p95_ms": main["p95"],
        "overhead_p99_ms": main["p99"], "overhead_wait0_p50_ms": zero["p50"],
        "overhead_wait0_p99_ms": zero["p99"], "overhead_light_p50_ms": light["p50"],
        "overhead_light_p99_ms": light["p99"]}, table,
        series={"rows": [{"rate": r["rate"], "batch_wait_ms": r["batch_wait_ms"],
                          "overhead": r["overhead"],
                          "stages": r["stages"]} for r in rows]})


def plot(series: dict[str, Any], ax: Any) -> None:
    for row in series["rows"]:
        values = sorted(row["overhead"])
        n = len(values)
        ax.plot(values, [(i + 1) / n for i in range(n)],
                label=f"{row['rate']:.0f} req/s, batch_wait_ms={row['batch_wait_ms']}")
    ax.axvline(10, color="grey", ls=":", label="p50 target 10 ms")
    ax.axvline(25, color="grey", ls="--", label="p99 target 25 ms")
    ax.set_xlabel("end-to-end latency minus engine time (ms)")
    ax.set_ylabel("fraction of requests")
    ax.set_xscale("log")
    ax.set_title("Pipeline overhead per request (bench engine)")
    ax.legend()


__all__ = ["plot", "run"]
