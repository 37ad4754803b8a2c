"""Memory: a worker's RSS over many requests, and the profile LRU's byte bound.

One worker subprocess (`bench.probe`: the real worker plus a sampler of its own
RSS and profile-cache stats every 0.5 s) with the zero-cost bench engine and a profile cache
bounded by bytes, not count (VF_PROFILE_CACHE_MB=1, entries unbounded in practice) ->
REQUESTS requests over 1,000 voices drawn uniformly (1,000 profiles need ~1.5 MB, more than
the bound, so the LRU must evict by bytes), produced at once (the worker pauses its
partitions when its queue is full) -> all answered. Growth = (RSS at the end - RSS after the
first 20 % of requests) / RSS after them. The bound holds when the cache's bytes never
exceed its limit while it evicts.
"""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import orjson

from bench.harness import BenchContext, Load
from bench.outcome import Outcome, md_table
from bench.processes import WorkerProcess
from bench.readers import ResultLog
from bench.workload import bench_text, voice_id, zipf_voices
from topics.events import SynthesisRequest

N_VOICES = 1000
WARM_FRACTION = 0.2
CACHE_MB = 1


async def run(ctx: BenchContext) -> Outcome:
    count = ctx.pick(1500, 10_000)
    ctx.register([voice_id(i) for i in range(N_VOICES)])
    s = await ctx.settings("memory", engine="bench")
    samples_file = ctx.work_dir / f"memory-{uuid.uuid4().hex[:6]}.jsonl"
    # The probe is the worker plus its sampler; started instead of `voicefactory worker`.
    worker = WorkerProcess(s, ctx.work_dir / "memory.log", module="bench.probe",
                           args=[str(samples_file)],
                           env={"VF_PROFILE_CACHE_MB": str(CACHE_MB),
                                "VF_PROFILE_CACHE_ENTRIES": "1000000"})
    tag = uuid.uuid4().hex[:6]
    batch = [SynthesisRequest(request_id=f"mem-{tag}-{i:06d}", voice_id=v, text=bench_text(i),
                              language="en")
             for i, v in enumerate(zipf_voices(count, N_VOICES, 0.0, seed=5))]
    try:
        async with Load(s) as load, ResultLog(s) as results:
            await worker.wait_log("assigned partitions", 120)
            await load.burst(batch)
            missing = await results.wait_for({r.request_id for r in batch}, count / 10 + 60)
            await asyncio.sleep(1.5)  # a last sample after the last answer
    finally:
        await worker.stop()
    if missing:
        raise RuntimeError(f"memory: {len(missing)} of {count} requests unanswered")
    samples = [orjson.loads(line) for line in samples_file.read_bytes().splitlines() if line]
    return _outcome(samples, count)


def _outcome(samples: list[dict[str, Any]], count: int) -> Outcome:
    if not samples:
        raise RuntimeError("memory: the probe wrote no samples")
    warm_at = next((x for x in samples if x["processed"] >= WARM_FRACTION * count), samples[-1])
    end = samples[-1]
    growth = (end["rss"] - warm_at["rss"]) / warm_at["rss"]
    peak = max(x["rss"] for x in samples if x["t"] >= warm_at["t"])
    max_cache = max(x["bytes"] for x in samples)
    bound = samples[0]["max_bytes"]
    held = all(x["bytes"] <= x["max_bytes"] for x in samples)
    mib = 2**20
    table = md_table(
        ["requests", "RSS after warm-up (MiB)", "RSS at end (MiB)", "peak after warm-up (MiB)",
         "growth after warm-up", "profile cache bytes (max seen / bound)", "entries at end",
         "evictions", "byte bound held"],
        [[count, round(warm_at["rss"] / mib, 1), round(end["rss"] / mib, 1),
          round(peak / mib, 1), f"{growth:+.2%}", f"{max_cache:,} / {bound:,}",
          end["entries"], end["evictions"], "yes" if held else "NO"]])
    return Outcome("memory", {
        "rss_growth_fraction": round(growth, 4),
        "rss_after_warmup_mib": round(warm_at["rss"] / mib, 1),
        "rss_end_mib": round(end["rss"] / mib, 1),
        "memory_cache_bytes_max": max_cache, "memory_cache_bytes_bound": bound,
        "memory_cache_evictions": end["evictions"], "memory_byte_bound_held": int(held)},
        table, series={"samples": samples, "warm_processed": warm_at["processed"]})


def plot(series: dict[str, Any], ax: Any) -> None:
    samples = series["samples"]
    mib = 2**20
    ax.plot([x["processed"] for x in samples], [x["rss"] / mib for x in samples],
            label="worker RSS (MiB)")
    ax.axvline(series["warm_processed"], color="grey", ls=":", label="end of warm-up")
    ax.set_xlabel("requests answered")
    ax.set_ylabel("RSS (MiB)")
    twin = ax.twinx()
    twin.plot([x["processed"] for x in samples], [x["bytes"] / 1024 for x in samples],
              color="tab:orange", label="profile cache (KiB)")
    twin.axhline(samples[0]["max_bytes"] / 1024, color="tab:orange", ls="--",
                 label="cache byte bound")
    twin.set_ylabel("profile cache (KiB)")
    ax.set_title("Worker memory over the run, profile LRU bounded by bytes")
    lines = ax.get_legend_handles_labels()
    more = twin.get_legend_handles_labels()
    ax.legend(lines[0] + more[0], lines[1] + more[1], loc="center right", fontsize=8)
