"""Faults under load: kill -9 of a worker, a broker restart, an S3 outage.

Per fault: fresh topics -> two worker subprocesses (static members `w0`, `w1`, bench engine
20 ms a call) -> warm-up -> requests paced at RATE over VOICES for PRE_S + AFTER_S seconds ->
at PRE_S the fault: `kill -9` of w0 (w1 takes its partitions once the 10-s session timeout
expires); SIGTERM to the broker, wait for it to exit, `dev up` again; SIGKILL to the S3
server, OUTAGE_S seconds, `dev up` again -> load ends -> wait for every request the broker
acknowledged to be answered. Lost: acknowledged requests never answered. Duplicates: answers
beyond the first per request_id (at-least-once; the object is still written once).
Recovery: seconds from the end of the fault (the kill, the broker answering again, S3
answering again) until the backlog is back within its baseline range (<= the maximum before
the fault) for 1 s.
Broker and S3 faults need the stack started from this state dir (`ctx.stack`, the CLI's
`deploy.local.stack` behind `bench.stack.LocalStack`); otherwise they are skipped, their
figures None. Whatever happens, the stack is brought back up.
"""

from __future__ import annotations

import asyncio
import os
import signal
import time
from collections.abc import Awaitable, Callable
from typing import Any

from bench.harness import (
    BenchContext,
    Load,
    Sampler,
    lag_probe,
    warm,
)
from bench.outcome import Outcome, md_table
from bench.processes import WorkerProcess
from bench.readers import ResultLog
from bench.stack import LocalStack
from bench.stats import recovery_time
from bench.workload import requests

RATE = 20.0
VOICES = [f"voice-{i:04d}" for i in range(50)]
ENGINE = {"VF_BENCH_BASE_MS": "20"}

Inject = Callable[[list[WorkerProcess]], Awaitable[float]]  # returns the outage in seconds


async def _kill9(workers: list[WorkerProcess]) -> float:
    os.kill(workers[0].pid, signal.SIGKILL)
    await asyncio.to_thread(workers[0].proc.wait, 10)
    return 0.0


def _broker(stack: LocalStack) -> Inject:
    async def inject(workers: list[WorkerProcess]) -> float:
        t0 = time.monotonic()
        await asyncio.to_thread(stack.restart_broker, 120)
        return time.monotonic() - t0

    return inject


def _s3_outage(stack: LocalStack, seconds: float) -> Inject:
    async def inject(workers: list[WorkerProcess]) -> float:
        t0 = time.monotonic()
        stack.kill_store()
        try:
            await asyncio.sleep(seconds)
        finally:
            await asyncio.to_thread(stack.ensure_up, 120)
        return time.monotonic() - t0

    return inject


async def _scenario(ctx: BenchContext, name: str, inject: Inject, pre_s: float,
                    after_s: float) -> dict[str, Any]:
    s = await ctx.settings(f"fault-{name}", engine="bench")
    workers = [WorkerProcess(s.with_overrides(
                                 worker={"instance_id": f"{s.kafka.topic_prefix}w{i}"}),
                             ctx.work_dir / f"fault-{name}-w{i}.log", env=ENGINE)
               for i in range(2)]
    try:
        async with Load(s) as load, ResultLog(s) as results:
            for w in workers:
                await w.wait_log("assigned partitions", 120)
            await warm(ctx, s, VOICES, load, results)
            batch = requests(int(RATE * (pre_s + after_s)), VOICES, prefix=name)
            lag = Sampler(lag_probe(load, results)).start()
            stream = asyncio.create_task(load.paced(batch, RATE))
            await asyncio.sleep(pre_s)
            fault_t = lag.now()
            outage_s = await inject(workers)
            end_t = lag.now()
            await stream
            await load.flush()
            wanted = {r.request_id for r in batch} & load.acked
            missing = await results.wait_for(wanted, 180)
            await asyncio.sleep(1.5)  # the series must show the backlog staying down
            points = await lag.stop()
    finally:
        await asyncio.gather(*(w.stop() for w in workers), return_exceptions=True)
        if not ctx.stack.all_answering():
            await asyncio.to_thread(ctx.stack.ensure_up, 180)
    ids = {r.request_id for r in batch}
    answers = [res for _, res in results.arrivals if res.request_id in ids]
    baseline = [y for t, y in points if t < fault_t] or [0.0]
    threshold = max(1.0, *baseline)  # back within the range it had before the fault
    return {"name": name, "sent": len(batch), "acked": len(wanted),
            "not_produced": len(ids) - len(wanted), "lost": len(missing),
            "duplicates": len(answers) - len({a.request_id for a in answers}),
            "failed": sum(1 for a in answers if a.status != "succeeded"),
            "outage_s": round(outage_s, 1),
            "recovery_s": recovery_time(points, fault_t=end_t, threshold=threshold,
                                        hold_s=1.0),
            "peak_backlog": max(y for _, y in points), "lag": points, "fault_t": fault_t,
            "end_t": end_t}


async def run(ctx: BenchContext) -> Outcome:
    pre_s, after_s = ctx.pick((4.0, 15.0), (10.0, 40.0))
    outage = ctx.pick(10.0, 30.0)
    ctx.register(VOICES)
    stack = ctx.stack
    plan: list[tuple[str, Inject | None, str]] = [
        ("kill9", _kill9, "kill -9 of one of two workers"),
        ("broker_restart", _broker(stack) if stack.broker_started_here() else None,
         "broker restart"),
        ("s3_outage", _s3_outage(stack, outage) if stack.store_started_here() else None,
         f"S3 server down for {outage:.0f} s"),
    ]
    rows: list[dict[str, Any]] = []
    figures: dict[str, float | int | None] = {}
    notes: list[str] = []
    for name, inject, what in plan:
        if inject is None:
            notes.append(f"{what}: skipped, the stack was not started from this state dir")
            for k in ("lost", "duplicates", "recovery_s"):
                figures[f"fault_{name}_{k}"] = None
            continue
        row = await _scenario(ctx, name, inject, pre_s, after_s)
        row["what"] = what
        rows.append(row)
        for k in ("lost", "duplicates", "recovery_s", "failed", "not_produced", "outage_s"):
            figures[f"fault_{name}_{k}"] = row[k]
    table = md_table(["fault", "requests sent", "acknowledged by the broker", "lost",
                      "duplicate answers", "answered failed", "fault lasted (s)",
                      "peak backlog", "recovery after it (s)"],
                     [[r["what"], r["sent"], r["acked"], r["lost"], r["duplicates"],
                       r["failed"], r["outage_s"], r["peak_backlog"], r["recovery_s"]]
                      for r in rows])
    return Outcome("faults", figures, table, notes=notes,
                   series={"rows": [{k: r[k] for k in ("what", "lag", "fault_t", "end_t")}
                                    for r in rows]})


def plot(series: dict[str, Any], ax: Any) -> None:
    for r in series["rows"]:
        line, = ax.plot([t - r["fault_t"] for t, _ in r["lag"]], [y for _, y in r["lag"]],
                        label=r["what"])
        ax.axvline(r["end_t"] - r["fault_t"], color=line.get_color(), ls=":", lw=0.8)
    ax.axvline(0, color="grey", ls="--", label="fault starts")
    ax.set_xlabel("seconds from the fault (dotted: fault over)")
    ax.set_ylabel("backlog: sent - answered")
    ax.set_title(f"Faults under {RATE:.0f} req/s, two workers")
    ax.legend(fontsize=8)
