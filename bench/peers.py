"""`voicefactory bench peers`: the seed's design built from real parts, beside the fleet.

Both designs: the bench engine at ENGINE (250 ms + 50 ms an item a call: one request takes
300 ms, a batch of 8 takes 650 ms), 4 processes x 2 engine slots, the same post-processing
(RequestProcessor: loudness, WAV, S3 put, presign), a profile LRU of 256 per process over
the same 1,000 registered voices, and the same request trace: Zipf(1.1) voice draws
(seed 16), 20-character texts. Offered loads are fractions of NOMINAL_RPS, what 8 slots
serve at one request a call.

- nginx: 4 `python -m bench.modelserver` processes (bench/modelserver.py: the worker's
  objects behind a small ASGI app on uvicorn, 2 x max_inflight threads, a queue behind) ->
  nginx (bench/nginx.py: least_conn, keep-alive to the upstreams, proxy_next_upstream on
  error/timeout/502/503 incl. POST, 3 tries) -> HttpLoad POSTs each request, one try.
- VoiceFactory: 4 `voicefactory worker` processes, static members (VF_INSTANCE_ID each),
  max_inflight 2, max_batch 8 -> Load routes each request as the gateway does
  (consumers.fleet: bounded loads over the workers' tts.fleet statuses, balance 1.25, and
  the gateway's failover: a request whose worker left the view unanswered is sent again)
  -> answers read from `tts.results`, each one ending its count in the router; each
  route's reason counted per level (`peers_vf_routes_<reason>` over the levels whose
  builds are counted: `moved` is a route to a worker without the voice's profile); and
  per level where its time went besides the engine (vf_path: `queued` from the request
  record to its call, `back` from the result record to the driver, how many waited for
  a slot), `peers_vf_{queued,back}_p{50,99}_ms_at_70` and `peers_vf_waited_at_70`.

Per design: start, wait until ready (VoiceFactory: every worker assigned, and the router's
view holding all of them) -> warm-up (WARM_S at 50 % load) -> per load level:
the next slice of the trace, paced for LEVEL_S, every answer awaited -> profile lookups
(`vf_profile_cache_total`, scraped from each process's /metrics) and CPU (bench.cpu) over
the levels -> kill run at 70 %: KILL_S seconds, one server / worker killed -9 after
KILL_AT_S -> every answer awaited (120 s) -> stop. The two designs run one after the other.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import time
import urllib.request
import uuid
from collections import Counter
from collections.abc import Awaitable, Callable
from typing import Any

from bench.cpu import LEDGER, CpuMeter
from bench.harness import BenchContext, Load
from bench.nginx import NEXT_UPSTREAM, NEXT_UPSTREAM_TRIES, Nginx, free_port
from bench.outcome import Outcome, md_table
from bench.peerload import (
    ERROR,
    FAILED,
    OK,
    PATH_KEYS,
    WAITED_MS,
    Answer,
    HttpLoad,
    account,
    builds,
    profile_counts,
    throughput_at_p99,
    vf_path,
)
from bench.processes import WorkerProcess
from bench.readers import ResultLog
from bench.workload import bench_text, voice_id, zipf_voices
from consumers.fleet.router import ROUTE_REASONS
from topics.events import SynthesisRequest

N_VOICES = 1000
ZIPF_S = 1.1
TRACE_SEED = 16  # the one trace every recorded run used
PROCESSES = 4
SLOTS = 2  # max_inflight: concurrent syntheses per process, both designs
MAX_BATCH = 8  # VoiceFactory batches a voice's requests; a model server takes them one by one
ENGINE = {"VF_BENCH_BASE_MS": "250", "VF_BENCH_PER_ITEM_MS": "50"}
NOMINAL_RPS = PROCESSES * SLOTS / 0.300  # 26.7 req/s: 8 slots at one 300-ms request a call
P99_BOUND_MS = 1000.0  # "equal p99": the throughput each design holds within this
KILL_LOAD = 0.7
ROUTE_BALANCE = 1.25  # VF_ROUTE_BALANCE's default: what the gateway routes callers with
DESIGNS = ("nginx", "voicefactory")


def trace(count: int, tag: str, seed: int = TRACE_SEED) -> list[SynthesisRequest]:
    """The shared trace: voice i and text i are the same in both designs; IDs differ.
    Another seed draws the same voices' popularity in another order (bench.hindsight)."""
    voices = zipf_voices(count, N_VOICES, ZIPF_S, seed=seed)
    return [SynthesisRequest(request_id=f"{tag}-{i:06d}", voice_id=v, text=bench_text(i),
                             language="en") for i, v in enumerate(voices)]


# Past nominal load each design goes on to the next level only while its p99 held the
# bound at the last one, so both are offered loads until they pass it (batching lets the
# fleet carry more than nginx's 8 unbatched slots); the kill run's slice of the trace comes
# after every level's, so both designs get the same requests at each level they ran.
BEYOND = (1.3, 1.5, 1.7, 2.0, 2.5)


def plan(quick: bool) -> dict[str, Any]:
    loads = (0.5, 0.7, 0.9, 1.1) if quick else (0.3, 0.5, 0.7, 0.9, 1.1)
    return {"loads": loads + BEYOND, "always_up_to": 1.1,
            "level_s": 5.0 if quick else 30.0, "warm_s": 3.0 if quick else 15.0,
            "kill_s": 10.0 if quick else 40.0, "kill_at_s": 3.0 if quick else 10.0}


def slices(p: dict[str, Any]) -> list[tuple[str, float, int]]:
    """(name, load, count) of each part of the run, in order: warm, levels, kill."""
    parts = [("warm", 0.5, p["warm_s"])] + [(f"load{x:.1f}", x, p["level_s"])
                                            for x in p["loads"]]
    parts.append(("kill", KILL_LOAD, p["kill_s"]))
    return [(name, load, round(load * NOMINAL_RPS * s)) for name, load, s in parts]


def _scrape(port: int) -> dict[str, float]:
    url = f"http://127.0.0.1:{port}/metrics"
    with urllib.request.urlopen(url, timeout=10) as r:
        return profile_counts(r.read().decode())


async def _profiles(ports: list[int]) -> dict[str, float]:
    counts = await asyncio.gather(*(asyncio.to_thread(_scrape, p) for p in ports))
    return {k: sum(c[k] for c in counts) for k in ("hit", "store", "miss")}


async def _healthy(port: int, proc: WorkerProcess, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.proc.poll() is not None:
            raise RuntimeError(f"model server exited: {proc.log_text()[-1500:]}")
        with contextlib.suppress(OSError):
            await asyncio.to_thread(urllib.request.urlopen,
                                    f"http://127.0.0.1:{port}/healthz", timeout=2)
            return
        await asyncio.sleep(0.5)
    raise TimeoutError(f"model server on {port} not healthy after {timeout_s:.0f} s")


Send = Callable[..., Awaitable[dict[str, Any]]]  # (part, rate, *, kill_after_s, kill)


async def _levels(p: dict[str, Any], requests: list[SynthesisRequest], send: Send,
                  kill: Callable[[], None], ports: list[int],
                  meters: dict[str, list[CpuMeter]]) -> dict[str, Any]:
    """Warm-up, the load levels (profiles and CPU counted over them), the kill run."""
    rows: list[dict[str, Any]] = []
    rising = True  # every level so far past `always_up_to` held the p99 bound
    at = 0
    before: dict[str, float] = {}
    after: dict[str, float] = {}
    used: dict[str, float] = {}
    for name, load, count in slices(p):
        part = requests[at:at + count]
        at += count
        if name.startswith("load") and load > p["always_up_to"]:
            if not after:  # profiles over the levels both designs run, up to always_up_to
                after = await _profiles(ports)
            last = rows[-1] if rows else None
            rising = rising and last is not None and last["p99_ms"] is not None \
                and last["p99_ms"] <= P99_BOUND_MS
            if not rising:
                continue  # past the bound at the level before: this design is done rising
        if name == "kill":
            after = after or await _profiles(ports)
            used = {k: sum(m.close() for m in ms) for k, ms in meters.items()}
            row = await send(part, load * NOMINAL_RPS, kill_after_s=p["kill_at_s"], kill=kill)
            row.update(name=name, load=load)
            return {"rows": rows, "kill": row, "profiles": builds(before, after),
                    "cpu_s": used}
        row = await send(part, load * NOMINAL_RPS)
        if name == "warm":
            before = await _profiles(ports)
            for ms in meters.values():
                for m in ms:
                    m.mark()
            continue
        row.update(name=name, load=load)
        rows.append(row)
    raise AssertionError("the plan ends with the kill run")


async def _nginx(ctx: BenchContext, p: dict[str, Any],
                 requests: list[SynthesisRequest]) -> dict[str, Any]:
    s = await ctx.settings("peers-nginx", max_inflight=SLOTS, max_batch=MAX_BATCH)
    ports = [free_port() for _ in range(PROCESSES)]
    started = time.monotonic()
    servers = [WorkerProcess(s, ctx.work_dir / f"peers-server{i}.log", module="bench.modelserver",
                             args=["--port", str(port)],
                             env={**ENGINE, "VF_INSTANCE_ID": f"{s.kafka.topic_prefix}m{i}"})
               for i, port in enumerate(ports)]
    proxy = Nginx(ctx.work_dir / "peers-nginx", ports)
    try:
        await asyncio.gather(*(_healthy(port, srv, 300) for port, srv in zip(ports, servers,
                                                                              strict=True)))
        await asyncio.to_thread(proxy.start)
        assert proxy.proc is not None
        meters = {"servers": [CpuMeter(srv.pid) for srv in servers],
                  "nginx": [CpuMeter(proxy.proc.pid)]}

        def kill() -> None:
            os.kill(servers[0].pid, signal.SIGKILL)

        async with HttpLoad(proxy.url) as http:
            async def send(part: list[SynthesisRequest], rate: float, *,
                           kill_after_s: float | None = None,
                           kill: Callable[[], None] | None = None) -> dict[str, Any]:
                run = asyncio.create_task(http.paced(part, rate))
                if kill is not None and kill_after_s is not None:
                    await asyncio.sleep(kill_after_s)
                    kill()
                await run
                ids = {r.request_id for r in part}
                return account({k: v for k, v in http.sent.items() if k in ids},
                               {k: v for k, v in http.answers.items() if k in ids})

            ready_s = time.monotonic() - started
            out = await _levels(p, requests, send, kill, ports, meters)
            out["startup_s"] = round(ready_s, 1)
        await asyncio.to_thread(proxy.stop)
        lines = proxy.access_log()
        kill_from = min(http.sent[r.request_id] for r in requests[-out["kill"]["sent"]:])
        out["kill"]["retried"] = sum(1 for line in lines if line.retried and line.at >= kill_from)
        out["retried_total"] = sum(1 for line in lines if line.retried)
        return out
    finally:
        await asyncio.to_thread(proxy.stop)
        await asyncio.gather(*(srv.stop() for srv in servers), return_exceptions=True)


async def _voicefactory(ctx: BenchContext, p: dict[str, Any],
                        requests: list[SynthesisRequest]) -> dict[str, Any]:
    s = await ctx.settings("peers-vf", max_inflight=SLOTS, max_batch=MAX_BATCH)
    ports = [free_port() for _ in range(PROCESSES)]
    started = time.monotonic()
    workers = [WorkerProcess(s, ctx.work_dir / f"peers-worker{i}.log",
                             env={**ENGINE, "VF_INSTANCE_ID": f"{s.kafka.topic_prefix}w{i}",
                                  "VF_METRICS_PORT": str(port)})
               for i, port in enumerate(ports)]
    try:
        async with Load(s, routed=True) as load, ResultLog(s, on_answer=load.done) as results:
            load.follow_answers(lambda rid: rid in results.first)  # as the gateway does
            await asyncio.gather(*(w.wait_log("assigned partitions", 300) for w in workers))
            await load.wait_fleet(PROCESSES, 120)
            meters = {"workers": [CpuMeter(w.pid) for w in workers]}

            def kill() -> None:
                meters["workers"][0].read()
                os.kill(workers[0].pid, signal.SIGKILL)

            async def send(part: list[SynthesisRequest], rate: float, *,
                           kill_after_s: float | None = None,
                           kill: Callable[[], None] | None = None) -> dict[str, Any]:
                assert load.sender is not None
                reasons_before = Counter(load.sender.reasons)
                run = asyncio.create_task(load.paced(part, rate))
                if kill is not None and kill_after_s is not None:
                    await asyncio.sleep(kill_after_s)
                    kill()
                await run
                await load.flush()
                ids = {r.request_id for r in part}
                acked = ids & load.acked
                await results.wait_for(acked, 120 if kill is not None else 180)
                answers = {rid: Answer(t, OK if res.status == "succeeded" else FAILED)
                           for rid, (t, res) in results.first.items() if rid in ids}
                duplicates = sum(1 for _, res in results.arrivals
                                 if res.request_id in ids) - len(answers)
                # Never acknowledged by the broker: the producer got an error, no answer.
                answers.update({rid: Answer(time.time(), ERROR, "not produced")
                                for rid in ids - acked})
                row = account({k: v for k, v in load.sent.items() if k in ids}, answers)
                row["duplicates"] = duplicates
                # why each request went where it did (a failover's re-send counts too)
                row["reasons"] = dict(load.sender.reasons - reasons_before)
                row["path"] = vf_path((a.at, results.produced_at[rid],
                                       results.first[rid][1].timings_ms or {})
                                      for rid, a in answers.items() if a.verdict == OK)
                return row

            ready_s = time.monotonic() - started
            out = await _levels(p, requests, send, kill, ports, meters)
            out["startup_s"] = round(ready_s, 1)
            return out
    finally:
        await asyncio.gather(*(w.stop() for w in workers), return_exceptions=True)


async def run(ctx: BenchContext) -> Outcome:
    p = plan(ctx.quick)
    total = sum(count for _, _, count in slices(p))
    await asyncio.to_thread(ctx.register, [voice_id(i) for i in range(N_VOICES)])
    tag = uuid.uuid4().hex[:6]
    ledger_from = len(LEDGER.entries)
    results = {"nginx": await _nginx(ctx, p, trace(total, f"ng-{tag}")),
               "voicefactory": await _voicefactory(ctx, p, trace(total, f"vf-{tag}"))}
    vf_ledger = LEDGER.per_request_ms(LEDGER.entries[ledger_from:])
    return outcome(results, p, vf_worker_lifetime_ms=vf_ledger)


def _cpu_ms(result: dict[str, Any], key: str) -> float | None:
    ok = sum(r["ok"] for r in result["rows"])
    return round(1000 * result["cpu_s"][key] / ok, 2) if ok else None


def route_reasons(rows: list[dict[str, Any]], up_to: float) -> dict[str, int]:
    """`peers_vf_routes_<reason>`: the router's reasons over the levels whose profile builds
    are counted (up to `up_to`); `moved` is the routes to a worker without the voice's
    profile, the builds routing chose beside the first sightings every design pays."""
    total: Counter[str] = Counter()
    for row in rows:
        if row["load"] <= up_to + 1e-9:
            total.update(row.get("reasons", {}))
    return {f"peers_vf_routes_{reason}": total[reason] for reason in ROUTE_REASONS}


def outcome(results: dict[str, dict[str, Any]], p: dict[str, Any], *,
            vf_worker_lifetime_ms: float | None = None) -> Outcome:
    """Figures, tables and plot series from both designs' results (pure)."""
    short = {"nginx": "nginx", "voicefactory": "vf"}
    figures: dict[str, float | int | None] = {"peers_nominal_rps": round(NOMINAL_RPS, 1),
                                              "peers_p99_bound_ms": P99_BOUND_MS}
    summary_rows = []
    for design in DESIGNS:
        r = results[design]
        d = short[design]
        at70 = next((row for row in r["rows"] if abs(row["load"] - KILL_LOAD) < 1e-9), None)
        cpu = _cpu_ms(r, "workers" if design == "voicefactory" else "servers")
        figures.update({
            f"peers_{d}_throughput_at_p99_rps": throughput_at_p99(r["rows"], P99_BOUND_MS),
            f"peers_{d}_max_throughput_rps": max(row["throughput_rps"] for row in r["rows"]),
            f"peers_{d}_p99_ms_at_70": at70["p99_ms"] if at70 else None,
            f"peers_{d}_p50_ms_at_70": at70["p50_ms"] if at70 else None,
            f"peers_{d}_profile_builds": r["profiles"]["builds"],
            f"peers_{d}_profile_computed": r["profiles"]["computed"],
            f"peers_{d}_profile_lookups": r["profiles"]["lookups"],
            f"peers_{d}_kill9_lost": r["kill"]["lost"],
            f"peers_{d}_kill9_failed": r["kill"]["failed"],
            f"peers_{d}_kill9_p99_ms": r["kill"]["p99_ms"],
            f"peers_{d}_cpu_ms_per_request": cpu,
            f"peers_{d}_startup_s": r.get("startup_s")})
        if design == "nginx":
            figures["peers_nginx_proxy_cpu_ms_per_request"] = _cpu_ms(r, "nginx")
            figures["peers_nginx_kill9_retried"] = r["kill"].get("retried")
        else:
            figures["peers_vf_kill9_duplicates"] = r["kill"].get("duplicates")
            figures["peers_vf_worker_lifetime_cpu_ms_per_request"] = vf_worker_lifetime_ms
            figures.update(route_reasons(r["rows"], p["always_up_to"]))
            path = at70.get("path", {}) if at70 else {}
            figures.update({f"peers_vf_{k}_at_70": path.get(k) for k in PATH_KEYS})
        summary_rows.append([
            design, figures[f"peers_{d}_throughput_at_p99_rps"],
            figures[f"peers_{d}_p99_ms_at_70"],
            f"{r['profiles']['builds']} of {r['profiles']['lookups']} "
            f"({r['profiles']['computed']} computed)",
            f"{r['kill']['lost']} of {r['kill']['sent']}"
            + (f" ({r['kill'].get('retried', 0)} retried by nginx)" if design == "nginx"
               else f" ({r['kill'].get('duplicates', 0)} duplicate answers)"),
            r["kill"]["p99_ms"],
            f"{cpu}" + (f" + nginx {figures['peers_nginx_proxy_cpu_ms_per_request']}"
                        if design == "nginx" else "")])
    table = md_table(
        ["design", f"throughput at p99 <= {P99_BOUND_MS:.0f} ms (req/s)",
         f"p99 at {KILL_LOAD:.0%} load (ms)", "profile builds (RAM misses) of lookups",
         "lost, one of 4 killed -9", "p99 in the kill run (ms)", "CPU ms per request"],
        summary_rows)
    table += "\n\nPer load level:\n\n" + md_table(
        ["design", "load", "offered req/s", "sent", "ok", "failed", "lost", "throughput req/s",
         "p50 ms", "p99 ms"],
        [[design, f"{row['load']:.0%}", round(row["load"] * NOMINAL_RPS, 1), row["sent"],
          row["ok"], row["failed"], row["lost"], row["throughput_rps"], row["p50_ms"],
          row["p99_ms"]]
         for design in DESIGNS for row in [*results[design]["rows"], results[design]["kill"]]])
    vf_rows = [row for row in [*results["voicefactory"]["rows"], results["voicefactory"]["kill"]]
               if "path" in row]
    if vf_rows:
        table += ("\n\nVoiceFactory's path besides the engine (queued: request record -> its "
                  "call starts, the Kafka hop and any wait for a slot; back: result record -> "
                  f"read by the driver; waited: queued over {WAITED_MS:.0f} ms):\n\n") + md_table(
            ["load", "ok", "queued p50 ms", "queued p99 ms", "back p50 ms", "back p99 ms",
             "waited for a slot"],
            [[f"{row['load']:.0%}" + (" (kill run)" if row.get("name") == "kill" else ""),
              row["ok"], *(row["path"][k] for k in PATH_KEYS)] for row in vf_rows])
    notes = [
        f"nginx: least_conn over {PROCESSES} model servers, keepalive {16} to the upstreams, "
        f"proxy_next_upstream {NEXT_UPSTREAM}, proxy_next_upstream_tries "
        f"{NEXT_UPSTREAM_TRIES}, max_fails=1 fail_timeout=10s; the client tries once",
        f"VoiceFactory: {PROCESSES} workers, requests routed by bounded loads over the fleet "
        f"view (balance {ROUTE_BALANCE}), static membership "
        f"(session timeout 10 s), max_inflight {SLOTS}, max_batch {MAX_BATCH}",
        f"engine: {ENGINE['VF_BENCH_BASE_MS']} ms + {ENGINE['VF_BENCH_PER_ITEM_MS']} ms an "
        f"item a call; nominal {NOMINAL_RPS:.1f} req/s; {p['level_s']:.0f} s a level, "
        f"kill -9 after {p['kill_at_s']:.0f} s of a {p['kill_s']:.0f}-s run at "
        f"{KILL_LOAD:.0%}",
        "start-up until ready (4 processes at once: torch, the speaker encoder; for "
        "VoiceFactory also the group join): "
        + ", ".join(f"{d} {results[d].get('startup_s')} s" for d in DESIGNS)]
    series = {d: [{"load": row["load"], "p99_ms": row["p99_ms"], "p50_ms": row["p50_ms"],
                   "throughput_rps": row["throughput_rps"]} for row in results[d]["rows"]]
              for d in DESIGNS}
    return Outcome("peers", figures, table, series=series, notes=notes)


def plot(series: dict[str, Any], ax: Any) -> None:
    for design, marker in zip(DESIGNS, ("o", "s"), strict=True):
        rows = [r for r in series[design] if r["p99_ms"] is not None]
        xs = [r["load"] * NOMINAL_RPS for r in rows]
        line, = ax.plot(xs, [r["p99_ms"] for r in rows], marker=marker,
                        label=f"{design} p99")
        ax.plot(xs, [r["p50_ms"] for r in rows], marker=marker, ls=":",
                color=line.get_color(), label=f"{design} p50")
    ax.axhline(P99_BOUND_MS, color="grey", ls="--", label=f"p99 bound {P99_BOUND_MS:.0f} ms")
    ax.set_yscale("log")
    ax.set_xlabel("offered load (req/s)")
    ax.set_ylabel("latency (ms)")
    ax.set_title(f"nginx least_conn vs VoiceFactory: {PROCESSES} x {SLOTS} slots, "
                 f"Zipf({ZIPF_S}) over {N_VOICES} voices")
    ax.legend(fontsize=8)
