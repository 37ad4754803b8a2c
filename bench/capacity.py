"""Capacity: the highest request rate one worker sustains when the engine costs nothing.

One worker subprocess, bench engine with zero cost and 1-s clips (20-character texts at
0.05 s a character: the audio is still generated, loudness-normalised, encoded as WAV,
stored and presigned) -> warm-up -> a ladder of offered rates (`next_rate`: doubling from
10/s, then refining within the octave where it first failed), each held for a step: lag
(sent - answered) sampled every 0.2 s; a rate is sustained when the lag's least-squares
slope over the step's second half is under 5 % of the rate per second and the backlog at
the end is at most half a second's worth (or 5 requests); the backlog drains between steps.
py-spy samples the worker during every step; the busiest step's profile is kept, and the
top costs are named by self time (the leaf function) and by the project's own frames.
Around the ladder, bench.cpu reads the CPU of every process on the path (worker, broker and
S3 server when this stack started them, the driver, the profilers): CPU ms per answered
request by process, and the rate at which they alone would fill this machine's cores.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

from bench.cpu import SPLIT_PARTS, machine_split, per_request_split
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
from bench.stats import slope
from bench.workload import TEXT_CHARS, requests

VOICES = [f"voice-{i:04d}" for i in range(100)]
ENGINE = {"VF_BENCH_SECONDS_PER_CHAR": str(1.0 / TEXT_CHARS)}  # every clip 1.0 s
OURS = ("consumers/", "pipeline/", "topics/")


def parse_collapsed(text: str) -> list[tuple[list[str], int]]:
    """py-spy's raw (collapsed) output: `frame;frame;... count` per line."""
    stacks = []
    for line in text.splitlines():
        head, _, count = line.rpartition(" ")
        if head and count.isdigit():
            stacks.append((head.split(";"), int(count)))
    return stacks


def _function(frame: str) -> str:
    """`name (path/to/file.py:123)` -> `name (file.py)`: costs summed over lines."""
    name, _, where = frame.partition(" (")
    path = where.rstrip(")").rsplit(":", 1)[0]
    for marker in ("site-packages/", "python3.11/"):
        if marker in path:
            path = path.split(marker, 1)[1]
            break
    else:
        for root in OURS:
            if root in path:
                path = root + path.split(root, 1)[1]
                break
    return f"{name} ({path})"


def top_costs(stacks: list[tuple[list[str], int]],
              n: int = 8) -> dict[str, list[tuple[str, float]]]:
    """Shares of all samples: by leaf function (self) and by project frame (inclusive)."""
    total = sum(c for _, c in stacks) or 1
    own: Counter[str] = Counter()
    inclusive: Counter[str] = Counter()
    for frames, count in stacks:
        own[_function(frames[-1])] += count
        for fn in {_function(f) for f in frames}:
            if fn.split(" (", 1)[1].startswith(OURS) and "bench/" not in fn:
                inclusive[fn] += count
    return {"self": [(fn, round(c / total, 3)) for fn, c in own.most_common(n)],
            "inclusive": [(fn, round(c / total, 3)) for fn, c in inclusive.most_common(n)]}


async def _profile(pid: int, seconds: float, out: Path) -> subprocess.CompletedProcess[str]:
    py_spy = Path(sys.executable).with_name("py-spy")
    argv = [str(py_spy), "record", "--pid", str(pid), "--duration", str(int(seconds)),
            "--rate", "100", "--format", "raw", "--output", str(out), "--nonblocking"]
    return await asyncio.to_thread(subprocess.run, argv, capture_output=True, text=True,
                                   check=False, timeout=seconds + 60)


async def _step(load: Load, results: ResultLog, rate: float, seconds: float,
                tag: str) -> dict[str, Any]:
    batch = requests(int(rate * seconds), VOICES, prefix=f"cap{int(rate)}", tag=tag)
    answered_before = results.answered
    sampler = Sampler(lag_probe(load, results)).start()
    await load.paced(batch, rate)
    points = await sampler.stop()
    answered = results.answered - answered_before
    half = [p for p in points if p[0] >= seconds / 2]
    growth = slope(half)
    final_lag = points[-1][1] if points else 0.0
    # Holding a rate: the backlog is not growing and what is left at the end is what is in
    # flight, not a queue (at most half a second's worth, or 5 requests at low rates).
    sustained = growth < 0.05 * rate and final_lag <= max(5.0, 0.5 * rate)
    # Answers counted over the step itself: a backlog answered later does not count.
    return {"rate": rate, "sent": len(batch), "answered_in_step": answered,
            "achieved_rps": round(answered / seconds, 1), "lag_slope": round(growth, 1),
            "final_lag": final_lag, "sustained": sustained,
            "lag": points}


async def _drain(load: Load, results: ResultLog, timeout_s: float) -> bool:
    missing = await results.wait_for(set(load.sent) - set(load.failed), timeout_s)
    return not missing


def next_rate(tried: dict[float, bool], start: float = 10.0,
              ceiling: float = 1000.0) -> float | None:
    """The ladder: double from `start` while rates hold; after the first failure at r, try
    r * 5/8, 6/8, 7/8 (within the last octave) upwards; None when nothing is left to try."""
    failed = sorted(r for r, ok in tried.items() if not ok)
    if not failed:
        rate = max(tried, default=start / 2) * 2
        return rate if rate <= ceiling else None
    top = failed[0]
    held = max((r for r, ok in tried.items() if ok), default=0.0)
    for eighth in (5, 6, 7):
        rate = top * eighth / 8
        if rate > held and rate not in tried:
            return rate
    return None


async def run(ctx: BenchContext) -> Outcome:
    seconds = ctx.pick(6.0, 20.0)
    ctx.register(VOICES)
    s = await ctx.settings("capacity", engine="bench")
    worker = WorkerProcess(s, ctx.work_dir / "capacity.log", env=ENGINE)
    steps: list[dict[str, Any]] = []
    profile_file = ctx.work_dir / "capacity-py-spy.txt"
    spies: dict[float, subprocess.CompletedProcess[str]] = {}
    try:
        async with Load(s) as load, ResultLog(s) as results:
            await worker.wait_log("assigned partitions", 120)
            await warm(ctx, s, VOICES, load, results)
            servers = ctx.stack.server_pids()
            cpu_before, answered_from = machine_split(worker.pid, servers), results.answered
            tried: dict[float, bool] = {}
            while (rate := next_rate(tried)) is not None:
                # Every step is profiled; the one kept is the busiest (highest rate) one.
                spy_task = asyncio.create_task(_profile(
                    worker.pid, seconds - 1, profile_file.with_suffix(f".{rate:.0f}.txt")))
                step = await _step(load, results, rate, seconds, tag=f"s{len(steps)}")
                spies[rate] = await spy_task
                steps.append(step)
                tried[rate] = step["sustained"]
                if not await _drain(load, results, 60):
                    break
            split = per_request_split(cpu_before, machine_split(worker.pid, servers),
                                      results.answered - answered_from,
                                      os.cpu_count() or 1, prefix="capacity")
    finally:
        await worker.stop()
    return _outcome(steps, profile_file, spies, split)


def split_table(split: dict[str, float | None]) -> str:
    """CPU ms per answered request by process, the parts that were read."""
    names = {"worker": "worker", "kafka": "broker", "s3": "S3 server",
             "driver": "bench driver (load + answers)", "profilers": "py-spy"}
    rows: list[list[object]] = [[names[part], split[f"capacity_cpu_ms_{part}"]]
                                for part in SPLIT_PARTS if f"capacity_cpu_ms_{part}" in split]
    return md_table(["process", "CPU ms per answered request"], rows)


def _outcome(steps: list[dict[str, Any]], profile_file: Path,
             spies: dict[float, subprocess.CompletedProcess[str]],
             split: dict[str, float | None]) -> Outcome:
    sustained = [st["rate"] for st in steps if st["sustained"]]
    capacity = max(sustained) if sustained else 0.0
    steps = sorted(steps, key=lambda st: st["rate"])
    rows = [[st["rate"], st["sent"], st["achieved_rps"], st["lag_slope"], st["final_lag"],
             "yes" if st["sustained"] else "no"] for st in steps]
    table = md_table(["offered req/s", "sent", "answered req/s during the step",
                      "lag slope (req/s)", "backlog at end", "sustained"], rows)
    notes = []
    costs: dict[str, list[tuple[str, float]]] = {"self": [], "inclusive": []}
    profile_rate = max(spies, default=None)
    kept = profile_file.with_suffix(f".{profile_rate:.0f}.txt") if profile_rate else None
    if kept is not None and kept.exists():
        costs = top_costs(parse_collapsed(kept.read_text()))
        kept.replace(profile_file)
        notes.append(f"py-spy profile at {profile_rate:.0f} req/s: {profile_file}")
        table += "\n\nTop costs (py-spy, share of samples, self time):\n\n" + md_table(
            ["function", "share"], [[f"`{fn}`", f"{share:.1%}"] for fn, share in costs["self"]])
        table += "\n\nProject frames (inclusive):\n\n" + md_table(
            ["function", "share"],
            [[f"`{fn}`", f"{share:.1%}"] for fn, share in costs["inclusive"]])
    elif profile_rate is not None:
        notes.append(f"py-spy failed: {spies[profile_rate].stderr.strip()[-300:]}")
    if split:
        table += ("\n\nCPU of every process on the path, over the ladder:\n\n"
                  + split_table(split))
        bound = split.get("capacity_cpu_bound_rps")
        notes.append(f"these processes alone fill {os.cpu_count()} cores at {bound} req/s"
                     if bound is not None else
                     "the broker or the S3 server was not started by this stack: their CPU "
                     "is not in the split, and no machine bound is given")
    return Outcome("capacity", {"capacity_rps": capacity, **split}, table,
                   series={"steps": [{k: v for k, v in st.items()} for st in steps]},
                   notes=notes)


def plot(series: dict[str, Any], ax: Any) -> None:
    offset = 0.0
    for st in series["steps"]:
        xs = [offset + t for t, _ in st["lag"]]
        ax.plot(xs, [y for _, y in st["lag"]],
                label=f"{st['rate']:.0f} req/s ({'ok' if st['sustained'] else 'lag grows'})")
        offset = xs[-1] + 1 if xs else offset
    ax.set_xlabel("seconds (steps back to back)")
    ax.set_ylabel("backlog: sent - answered")
    ax.set_title("Capacity of one worker, zero-cost engine, 1-s clips")
    ax.legend()
