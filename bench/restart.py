"""Restart locality: one of four workers restarted under load, static vs dynamic membership.

Per row: fresh topics -> four in-process workers (bench engine, 5 ms a call; static rows
give each a `VF_INSTANCE_ID`, dynamic rows none) -> steady load over VOICES (keyed by voice)
-> baseline -> worker 0 stops (drains; a dynamic member sends LeaveGroup, a static one does
not) and a new worker with the same settings starts RESTART_GAP_S (5 s) later, within the
10-s session timeout -> load goes on. Every 0.1 s the harness snapshots which worker owns
each partition; a voice "moved" when its murmur2 partition was ever owned by a worker other
than its owner before the restart (the restarted worker counts as the same one). Recovery:
seconds from the restart until the backlog (sent - answered) is back within the range it
had during the baseline (<= its maximum there) and stays there for 1 s.
"""

from __future__ import annotations

import asyncio
from collections.abc import Collection, Hashable, Sequence
from typing import Any

from bench.harness import (
    BenchContext,
    Load,
    Sampler,
    lag_probe,
    warm,
)
from bench.outcome import Outcome, md_table
from bench.processes import InProcessWorker
from bench.readers import ResultLog
from bench.stats import percentile, recovery_time
from bench.workload import requests
from consumers.settings import Settings
from topics.partitioning import partition_for
from topics.specs import REQUESTS, topic_names

VOICES = [f"voice-{i:04d}" for i in range(200)]
WORKERS = 4
RATE = 20.0
# About what a worker process takes here to start (imports, torch, encoder), and well
# within the 10-s session timeout: a static member must come back before it expires.
RESTART_GAP_S = 5.0
ENGINE = {"VF_BENCH_BASE_MS": "5"}


def moved_fraction(before: dict[int, int], snapshots: list[dict[int, int]],
                   voices: list[str]) -> float:
    """Voices whose partition was, in any snapshot, owned by another worker than before."""
    partitions = {p for snap in snapshots for p, owner in snap.items()
                  if before.get(p) is not None and owner != before[p]}
    moved = sum(1 for v in voices if partition_for(v, REQUESTS.partitions) in partitions)
    return round(moved / len(voices), 4)


def _owners(workers: list[InProcessWorker], topic: str) -> dict[int, int]:
    return {p: i for i, w in enumerate(workers) for p in w.assignment(topic)}


async def _watch(workers: list[InProcessWorker], topic: str,
                 snapshots: list[dict[int, int]]) -> None:
    """Owner of every partition of `topic` every 0.1 s; `workers[0]` is replaced on
    restart, so the list is read afresh each time."""
    while True:
        snapshots.append(_owners(workers, topic))
        await asyncio.sleep(0.1)


def settled(assignments: Sequence[Collection[Hashable]], partitions: int) -> bool:
    """Every partition owned, by one worker only, and every worker owning some: each
    worker's partitions as numbers of one topic, or as TopicPartitions of several."""
    owned = [p for parts in assignments for p in parts]
    return all(assignments) and len(owned) == len(set(owned)) == partitions


async def _settled(workers: list[InProcessWorker], topic: str,
                   timeout_s: float = 60) -> dict[int, int]:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while loop.time() < deadline:
        if settled([w.assignment(topic) for w in workers], REQUESTS.partitions):
            return _owners(workers, topic)
        await asyncio.sleep(0.2)
    owned = {i: sorted(w.assignment(topic)) for i, w in enumerate(workers)}
    raise TimeoutError(f"restart: the group did not settle with {len(workers)} workers owning "
                       f"{topic}'s {REQUESTS.partitions} partitions within {timeout_s:.0f} s "
                       f"(owned now: {owned})")


async def _row(ctx: BenchContext, static: bool, baseline_s: float,
               after_s: float) -> dict[str, Any]:
    kind = "static" if static else "dynamic"
    base = await ctx.settings(f"restart-{kind}", engine="bench")
    topic = topic_names(base.kafka.topic_prefix).requests  # where Load sends, voice-keyed

    def settings_of(i: int) -> Settings:
        name = f"{base.kafka.topic_prefix}w{i}" if static else ""  # "": dynamic member
        return base.with_overrides(worker={"instance_id": name})

    workers = [await asyncio.to_thread(InProcessWorker, settings_of(i), ENGINE)
               for i in range(WORKERS)]
    for w in workers:
        w.start()
    snapshots: list[dict[int, int]] = []
    try:
        async with Load(base) as load, ResultLog(base) as results:
            await _settled(workers, topic)
            await warm(ctx, base, VOICES, load, results)
            before = await _settled(workers, topic)
            total = int(RATE * (baseline_s + after_s))
            stream = asyncio.create_task(load.paced(requests(total, VOICES, prefix=kind), RATE))
            lag = Sampler(lag_probe(load, results), 0.1).start()
            watch = asyncio.create_task(_watch(workers, topic, snapshots))
            await asyncio.sleep(baseline_s)
            fault_t = lag.now()
            await workers[0].stop()
            await asyncio.sleep(RESTART_GAP_S)
            # Built off the loop (torch, the speaker encoder: seconds): the other members must
            # keep heartbeating and the watcher keep sampling meanwhile.
            workers[0] = await asyncio.to_thread(InProcessWorker, settings_of(0), ENGINE)
            workers[0].start()
            restart_s = lag.now() - fault_t
            await stream
            await results.wait_for(set(load.sent), 60)
            await asyncio.sleep(1.5)  # the series must show the backlog staying down
            points = await lag.stop()
            watch.cancel()
            final = _owners(workers, topic)
    finally:
        await asyncio.gather(*(w.stop() for w in workers), return_exceptions=True)
    baseline = [y for t, y in points if t < fault_t]
    threshold = max(1.0, *baseline)  # back within the range it had before the fault
    return {"kind": kind, "moved": moved_fraction(before, snapshots, VOICES),
            "moved_final": moved_fraction(before, [final], VOICES),
            "recovery_s": recovery_time(points, fault_t=fault_t, threshold=threshold,
                                        hold_s=1.0),
            "restart_s": round(restart_s, 2), "baseline_p95": percentile(baseline, 95),
            "peak_lag": max(y for _, y in points), "lag": points, "fault_t": fault_t}


async def run(ctx: BenchContext) -> Outcome:
    baseline_s, after_s = ctx.pick((6.0, 14.0), (20.0, 40.0))
    ctx.register(VOICES)
    rows = [await _row(ctx, True, baseline_s, after_s),
            await _row(ctx, False, baseline_s, after_s)]
    table = md_table(["membership", "voices that changed worker (any time)",
                      "changed owner for good", "worker down (s)", "backlog p95 before",
                      "peak backlog", "recovery to baseline (s)"],
                     [[r["kind"], r["moved"], r["moved_final"], r["restart_s"],
                       r["baseline_p95"], r["peak_lag"], r["recovery_s"]] for r in rows])
    static, dynamic = rows
    return Outcome("restart", {
        "restart_moved_fraction": static["moved"],
        "restart_moved_fraction_dynamic": dynamic["moved"],
        "restart_recovery_s": static["recovery_s"],
        "restart_recovery_s_dynamic": dynamic["recovery_s"]}, table,
        series={"rows": [{k: r[k] for k in ("kind", "lag", "fault_t")} for r in rows]})


def plot(series: dict[str, Any], ax: Any) -> None:
    for r in series["rows"]:
        ax.plot([t - r["fault_t"] for t, _ in r["lag"]], [y for _, y in r["lag"]],
                label=f"{r['kind']} membership")
    ax.axvline(0, color="grey", ls=":", label="worker 0 restarted")
    ax.set_xlabel("seconds from the restart")
    ax.set_ylabel("backlog: sent - answered")
    ax.set_title(f"One of {WORKERS} workers restarted at {RATE:.0f} req/s")
    ax.legend()
