"""`voicefactory bench [--quick] [--json FILE] [--only NAME ...]`: every measurement, in order.

stack check -> BenchContext (fresh bucket, reference clip) -> each selected measurement's
run(ctx) -> Outcome (figures, table, series) -> merge the figures into one flat JSON object
that always holds the REQUIRED keys (None where a measurement was not selected or could not
run) -> Markdown report (tables + notes + the machine) -> one PNG per measurement in the
plots folder. The run's topics and bucket are deleted at the end. A measurement that fails
is reported with its error and the others still run; the exit status says whether all
selected ones succeeded.
"""

from __future__ import annotations

import asyncio
import importlib
import logging
import os
import platform
import time
import traceback
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType
from typing import Any, TextIO

import orjson

from bench import NAMES
from bench.cpu import LEDGER
from bench.harness import BenchContext
from bench.outcome import Figure, Outcome
from bench.stack import LocalStack
from consumers import logs
from consumers.settings import Settings

log = logging.getLogger(__name__)

BENCHES: dict[str, ModuleType] = {name: importlib.import_module(f"bench.{name}")
                                   for name in NAMES}

# The keys issue 8 names; each is in the JSON even when its measurement did not run.
REQUIRED = (
    "overhead_p50_ms", "overhead_p99_ms", "capacity_rps", "cache_hit_ratio_voice_keyed",
    "cache_hit_ratio_least_conn", "cache_hit_ratio_round_robin", "restart_moved_fraction",
    "batching_gain_at_8", "rss_growth_fraction",
    "fault_kill9_lost", "fault_kill9_duplicates", "fault_kill9_recovery_s",
    "fault_broker_restart_lost", "fault_broker_restart_duplicates",
    "fault_broker_restart_recovery_s",
    "fault_s3_outage_lost", "fault_s3_outage_duplicates", "fault_s3_outage_recovery_s",
    # issue 16: the seed's design beside the fleet, and worker CPU per request (bench.cpu).
    "peers_nginx_throughput_at_p99_rps", "peers_vf_throughput_at_p99_rps",
    "peers_nginx_p99_ms_at_70", "peers_vf_p99_ms_at_70",
    "peers_nginx_profile_builds", "peers_vf_profile_builds",
    "peers_nginx_kill9_lost", "peers_vf_kill9_lost", "cpu_ms_per_request",
    # issue 14: the interactive lane beside a batch backlog, and the first streamed chunk.
    "lanes_interactive_idle_p99_ms", "lanes_interactive_loaded_p99_ms",
    "lanes_interactive_p99_ratio", "lanes_batch_solo_rps", "lanes_batch_loaded_rps",
    "lanes_batch_share", "first_chunk_p50_ms", "first_chunk_p99_ms",
    "first_chunk_overhead_p99_ms",
    # issue 20: fleet routing (bench.route; the peers figures above, rerun under routing).
    "route_narrator_speedup", "route_narrator_max_builds_per_worker",
    "cache_hit_ratio_fleet_routed",
    "route_brand_p99_over_idle", "route_brand_min_worker_share",
    "route_kill_first_chunk_p99_ms", "route_kill_lost", "route_kill_duplicates",
    # issue 15: the gateway's share of a caller's first byte (bench.gateway).
    "gateway_first_byte_p99_ms",
)


def merge(outcomes: Sequence[Outcome]) -> dict[str, Figure]:
    """Flat figures of all outcomes, REQUIRED keys first (None where missing)."""
    merged: dict[str, Figure] = dict.fromkeys(REQUIRED)
    seen: dict[str, str] = {}
    for outcome in outcomes:
        for key, value in outcome.figures.items():
            if key in seen:
                raise ValueError(f"figure {key!r} reported by both {seen[key]} and "
                                 f"{outcome.name}")
            seen[key] = outcome.name
            merged[key] = value
    return merged


def machine() -> dict[str, str | int | float]:
    cpu = "unknown"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
        mem_kib = next(int(line.split()[1]) for line in
                       Path("/proc/meminfo").read_text().splitlines()
                       if line.startswith("MemTotal:"))
    except (OSError, StopIteration, ValueError):
        mem_kib = 0
    load1 = os.getloadavg()[0] if hasattr(os, "getloadavg") else -1.0
    return {"nproc": os.cpu_count() or 0, "cpu": cpu, "ram_gib": round(mem_kib / 2**20, 1),
            "python": platform.python_version(), "load_avg_1m_at_start": round(load1, 2)}


def select(only: Sequence[str] | None) -> list[str]:
    if not only:
        return list(BENCHES)
    unknown = [n for n in only if n not in BENCHES]
    if unknown:
        raise ValueError(f"unknown benchmark(s) {', '.join(unknown)}; "
                         f"choose from {', '.join(BENCHES)}")
    return [n for n in BENCHES if n in only]  # always in the documented order


async def run_all(settings: Settings, *, stack: LocalStack, quick: bool,
                  only: Sequence[str] | None, work_dir: Path,
                  out: TextIO) -> tuple[dict[str, Any], list[Outcome], dict[str, str]]:
    names = select(only)
    ctx = BenchContext.create(settings, stack=stack, quick=quick, work_dir=work_dir)
    outcomes: list[Outcome] = []
    errors: dict[str, str] = {}
    timings: dict[str, float] = {}
    cpu: dict[str, float | None] = {}  # worker CPU ms per answered request, per measurement
    ledger_from = len(LEDGER.entries)
    for name in names:
        print(f"bench {name} ({'quick' if quick else 'full'}) ...", file=out, flush=True)
        started = time.monotonic()
        entries_from = len(LEDGER.entries)
        try:
            outcome = await BENCHES[name].run(ctx)
        except Exception as exc:
            log.debug("bench %s failed", name, exc_info=True)
            errors[name] = f"{type(exc).__name__}: {exc}"
            (work_dir / f"{name}.error.txt").write_text(traceback.format_exc())
            print(f"bench {name} FAILED: {errors[name]}", file=out, flush=True)
            continue
        timings[name] = round(time.monotonic() - started, 1)
        if len(LEDGER.entries) > entries_from:  # it ran worker processes
            cpu[name] = LEDGER.per_request_ms(LEDGER.entries[entries_from:])
        outcomes.append(outcome)
        print(f"bench {name}: {orjson.dumps(outcome.figures).decode()} "
              f"({timings[name]:.0f} s)", file=out, flush=True)
    try:
        await ctx.cleanup()
    except Exception as exc:  # the figures stand; say what was left behind
        print(f"cleanup of bucket {ctx.bucket} and the topics under {len(ctx.prefixes)} "
              f"prefixes ({', '.join(ctx.prefixes)}) failed: {exc}",
              file=out)
    figures: dict[str, Any] = dict(merge(outcomes))
    figures["cpu_ms_per_request"] = LEDGER.per_request_ms(LEDGER.entries[ledger_from:])
    figures.update({f"cpu_ms_per_request_{k}": v for k, v in cpu.items()})
    figures["quick"] = quick
    figures.update({f"machine_{k}": v for k, v in machine().items()})
    figures.update({f"seconds_{k}": v for k, v in timings.items()})
    return figures, outcomes, errors


def report(figures: dict[str, Any], outcomes: Sequence[Outcome], errors: dict[str, str],
           plots: dict[str, Path]) -> str:
    m = {k.removeprefix("machine_"): v for k, v in figures.items() if k.startswith("machine_")}
    lines = [f"Machine: {m.get('nproc')} cores ({m.get('cpu')}), {m.get('ram_gib')} GiB RAM, "
             f"Python {m.get('python')}, load average {m.get('load_avg_1m_at_start')} at start; "
             f"{'quick' if figures.get('quick') else 'full'} run.", ""]
    for outcome in outcomes:
        lines += [f"## {outcome.name}", "", outcome.table, ""]
        lines += [f"- {note}" for note in outcome.notes]
        if outcome.name in plots:
            lines += ["", f"![{outcome.name}]({plots[outcome.name]})"]
        lines.append("")
    for name, error in errors.items():
        lines += [f"## {name}", "", f"FAILED: {error}", ""]
    return "\n".join(lines)


def draw(outcomes: Sequence[Outcome], plots_dir: Path) -> dict[str, Path]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    plots_dir.mkdir(parents=True, exist_ok=True)
    written: dict[str, Path] = {}
    for outcome in outcomes:
        module = BENCHES[outcome.name]
        if not outcome.series or not hasattr(module, "plot"):
            continue
        fig, ax = plt.subplots(figsize=(7, 4.2), dpi=110)
        try:
            module.plot(outcome.series, ax)
            fig.tight_layout()
            path = plots_dir / f"bench-{outcome.name}.png"
            fig.savefig(path)
            written[outcome.name] = path
        finally:
            plt.close(fig)
    return written


def main(settings: Settings, *, stack: LocalStack, quick: bool, only: Sequence[str] | None,
         json_path: Path | None, plots_dir: Path | None, work_dir: Path,
         out: TextIO) -> int:
    """`stack`: the local stack the CLI hands in (bench/ does not import deploy/)."""
    if not stack.all_answering():
        raise RuntimeError("the local stack is not answering; run `voicefactory dev up` first")
    # Warnings and errors of the bench's own clients, formatted and with bursts folded (the
    # fault runs stop the broker on purpose); the workers log to files under work_dir.
    logs.configure("text", "WARNING")
    figures, outcomes, errors = asyncio.run(
        run_all(settings, stack=stack, quick=quick, only=only, work_dir=work_dir, out=out))
    plots = draw(outcomes, plots_dir) if plots_dir is not None else {}
    text = report(figures, outcomes, errors, plots)
    (work_dir / "report.md").write_text(text)
    (work_dir / "figures.json").write_bytes(orjson.dumps(figures, option=orjson.OPT_INDENT_2))
    if json_path is not None:
        json_path.parent.mkdir(parents=True, exist_ok=True)
        json_path.write_bytes(orjson.dumps(figures, option=orjson.OPT_INDENT_2))
    print(text, file=out)
    print(f"figures: {json_path or work_dir / 'figures.json'}; report: {work_dir / 'report.md'}",
          file=out)
    return 1 if errors else 0
