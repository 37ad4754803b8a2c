"""Lanes: an interactive caller's latency beside a batch backlog, and time to the first chunk.

Fresh topics (tts.requests, tts.requests.interactive, tts.results, tts.audio, tts.control)
-> one worker process (`voicefactory worker`, defaults but for the engine: bench engine,
1-s clips (`lanefigures.lane_text`), RTF 0.1 (VF_BENCH_PER_AUDIO_SECOND_MS=100), first chunk 200 ms
(VF_BENCH_FIRST_CHUNK_MS) then 0.25-s chunks (VF_BENCH_CHUNK_SECONDS), base and per-item
cost 0) -> every voice warmed on the batch lane, the callers' voices once more on the
interactive lane -> four phases back to back on that worker, interactive requests always at
RATE (2/s, over CALLER_VOICES) on tts.requests.interactive, batch lines over BATCH_VOICES on
tts.requests:

1. idle: interactive only, for `idle_s` -> end to end = answer read from tts.results -
   produce call, both on this process's clock.
2. first chunk: interactive with "stream": true, for `stream_s` -> the first record with
   audio read from tts.audio (`bench.streams.AudioLog`) - produce call; minus
   FIRST_CHUNK_MS, the engine's own first-chunk cost, that is the pipeline's part.
3. solo batch: a backlog that outlasts lead + window even at the engine's bound, produced
   at once -> batch answers a second within [lead, lead + window] after the produce.
4. mixed: the backlog topped up to `mixed_backlog` queued lines (10,000 in the full run,
   the issue's figure; --quick: 1.5 x what the engine bound could answer in lead + window)
   -> interactive for lead + window -> their end-to-end latency, and batch answers a second
   within the same window as in 3. The worker is stopped after it (what is left of the
   backlog goes with the topics).

An interactive request without an answer (or, streamed, without a chunk) within
`answer_timeout_s` of its phase's last send is unanswered: a percentile that falls among
those is None, and the outcome says "no answer within T s" instead of waiting longer. The
figures are computed in `bench.lanefigures`.
"""

from __future__ import annotations

import asyncio
import math
import time
import uuid
from dataclasses import dataclass
from typing import Any

from bench.harness import BenchContext, Load, warm
from bench.lanefigures import (
    STAGES,
    Sample,
    backlog_for,
    engine_bound_rps,
    lane_figures,
    lane_requests,
    paced_requests,
    rate_in,
    verdicts,
)
from bench.outcome import Outcome, md_table
from bench.processes import WorkerProcess
from bench.readers import ResultLog
from bench.streams import AudioLog
from bench.workload import TEXT_CHARS, voice_id
from topics.specs import (
    AUDIO,
    CONTROL,
    REQUESTS,
    REQUESTS_INTERACTIVE,
    REQUESTS_INTERACTIVE_SHARDS,
    REQUESTS_SHARDS,
    RESULTS,
    topic_names,
)

RATE = 2.0  # interactive requests a second (issue 14)
BATCH_VOICES = [voice_id(i) for i in range(8)]  # a video factory's few narrators
CALLER_VOICES = [voice_id(i) for i in range(100, 120)]  # callers: other voices
CLIP_S = 1.0
FIRST_CHUNK_MS = 200.0
PER_AUDIO_SECOND_MS = 100.0  # RTF 0.1
CHUNK_SECONDS = 0.25
# Base and per-item cost 0: a call costs its audio's seconds x 100 ms, and a streamed call's
# first chunk exactly VF_BENCH_FIRST_CHUNK_MS, whatever else the streaming path adds to it.
ENGINE = {"VF_BENCH_SECONDS_PER_CHAR": str(CLIP_S / TEXT_CHARS), "VF_BENCH_BASE_MS": "0",
          "VF_BENCH_PER_ITEM_MS": "0", "VF_BENCH_PER_AUDIO_SECOND_MS": str(PER_AUDIO_SECOND_MS),
          "VF_BENCH_FIRST_CHUNK_MS": str(FIRST_CHUNK_MS),
          "VF_BENCH_CHUNK_SECONDS": str(CHUNK_SECONDS)}
SPECS = (REQUESTS, REQUESTS_INTERACTIVE, REQUESTS_SHARDS, REQUESTS_INTERACTIVE_SHARDS, RESULTS,
         AUDIO, CONTROL)


@dataclass(frozen=True)
class Plan:
    idle_s: float
    stream_s: float
    lead_s: float  # after the backlog is produced, before the batch window opens
    window_s: float
    answer_timeout_s: float
    mixed_backlog: int | None  # queued batch lines at the start of phase 4; None: sized


QUICK = Plan(idle_s=20, stream_s=15, lead_s=3, window_s=12, answer_timeout_s=10,
             mixed_backlog=None)
FULL = Plan(idle_s=60, stream_s=60, lead_s=5, window_s=120, answer_timeout_s=30,
            mixed_backlog=10_000)


class Phases:
    """The open producers and readers of one run, and what each phase measured."""

    def __init__(self, plan: Plan, batch: Load, calls: Load, results: ResultLog,
                 audio: AudioLog) -> None:
        self.plan, self.batch, self.calls = plan, batch, calls
        self.results, self.audio = results, audio
        self.notes: list[str] = []
        self.tag = uuid.uuid4().hex[:6]

    def answered_at(self) -> dict[str, float]:
        return {rid: t for rid, (t, _) in self.results.first.items()}

    def batch_outstanding(self) -> int:
        first = self.results.first
        return sum(1 for rid in self.batch.sent
                   if rid not in first and rid not in self.batch.failed)

    async def interactive(self, name: str, seconds: float, *, stream: bool = False) -> list[str]:
        """Interactive requests paced at RATE for `seconds`; their IDs the broker took."""
        reqs = paced_requests(RATE, seconds, CALLER_VOICES, prefix=f"ia{name}",
                              tag=self.tag, stream=stream)
        await self.calls.paced(reqs, RATE)
        return await self.taken(name, [r.request_id for r in reqs])

    async def taken(self, name: str, rids: list[str]) -> list[str]:
        await self.calls.flush()
        ids = [rid for rid in rids if rid not in self.calls.failed]
        if len(ids) < len(rids):
            self.notes.append(f"{name}: {len(rids) - len(ids)} interactive requests were "
                              f"not taken by the broker (left out)")
        return ids

    async def answers(self, name: str, ids: list[str]) -> Sample:
        """Up to answer_timeout_s for the answers still missing; end to end of each."""
        timeout = self.plan.answer_timeout_s
        missing = await self.results.wait_for(set(ids), timeout)
        if missing:
            self.notes.append(f"{name}: no answer within {timeout:.0f} s of the last send "
                              f"for {len(missing)} of {len(ids)} interactive requests (does "
                              f"the worker read tts.requests.interactive?)")
        timings = {rid: r.timings_ms for rid, (_, r) in self.results.first.items()}
        return Sample.of(ids, self.calls.sent, self.answered_at(), timings)

    async def first_chunks(self, name: str, ids: list[str], wait_s: float) -> Sample:
        """Up to `wait_s` for the first chunks still missing; produce -> first audio record
        read, for each."""
        missing = await self.audio.wait_first(set(ids), wait_s)
        if missing:
            self.notes.append(f"{name}: no chunk on tts.audio within {wait_s:.0f} s of the "
                              f"last send for {len(missing)} of {len(ids)} streamed requests "
                              f"(does the worker stream \"stream\": true requests?)")
        return Sample.of(ids, self.calls.sent, self.audio.first_audio())

    async def batch_window(self, name: str, queued: int,
                           with_calls: bool) -> dict[str, Any]:
        """Top the batch backlog up to `queued` lines, then count batch answers a second in
        [lead, lead + window] after the produce, with interactive requests alongside if
        `with_calls`."""
        plan = self.plan
        extra = max(0, queued - self.batch_outstanding())
        await self.batch.burst(lane_requests(extra, BATCH_VOICES, prefix=f"bl{name}",
                                             tag=self.tag))
        t0 = time.time()
        queued_at_start = self.batch_outstanding()
        calls: asyncio.Task[None] | None = None
        reqs = []
        if with_calls:
            reqs = paced_requests(RATE, plan.lead_s + plan.window_s, CALLER_VOICES,
                                  prefix=f"ia{name}", tag=self.tag)
            calls = asyncio.create_task(self.calls.paced(reqs, RATE))
        await asyncio.sleep(max(0.0, t0 + plan.lead_s + plan.window_s - time.time()))
        left = self.batch_outstanding()
        answered = self.answered_at()
        times = [answered[rid] for rid in self.batch.sent if rid in answered]
        rps = rate_in(times, t0 + plan.lead_s, t0 + plan.lead_s + plan.window_s)
        if left == 0:
            self.notes.append(f"{name}: the backlog ran out before the window closed; "
                              f"{rps} answers/s is a lower bound")
        out: dict[str, Any] = {"queued_at_start": queued_at_start, "left_at_end": left,
                               "rps": rps, "answers": [t - t0 for t in times if t >= t0]}
        if calls is not None:
            await calls
            ids = await self.taken(name, [r.request_id for r in reqs])
            out["e2e"] = await self.answers(name, ids)
        return out


async def run(ctx: BenchContext) -> Outcome:
    plan: Plan = ctx.pick(QUICK, FULL)
    ctx.register(BATCH_VOICES + CALLER_VOICES)
    s = await ctx.settings("lanes", engine="bench", specs=SPECS)
    interactive_topic = topic_names(s.kafka.topic_prefix).requests_interactive
    bound = engine_bound_rps(s.worker.max_inflight, PER_AUDIO_SECOND_MS, CLIP_S)
    span = plan.lead_s + plan.window_s
    worker = WorkerProcess(s, ctx.work_dir / "lanes.log", env=ENGINE)
    try:
        async with (Load(s) as batch, Load(s, topic=interactive_topic) as calls,
                    ResultLog(s) as results, AudioLog(s) as audio):
            await worker.wait_log("assigned partitions", 120)
            await warm(ctx, s, BATCH_VOICES + CALLER_VOICES, batch, results)
            phases = Phases(plan, batch, calls, results, audio)
            # The interactive lane's own first-use costs stay out of the idle figure.
            warm_calls = lane_requests(len(CALLER_VOICES), CALLER_VOICES, prefix="iawarm",
                                       tag=phases.tag)
            await calls.burst(warm_calls)
            await phases.answers("interactive warm-up",
                                 await phases.taken("warm-up", [r.request_id for r in warm_calls]))
            idle = await phases.answers("idle", await phases.interactive("idle", plan.idle_s))
            ids = await phases.interactive("stream", plan.stream_s, stream=True)
            # One wait for both: the chunks come before the result.
            until = time.monotonic() + plan.answer_timeout_s
            streamed = await phases.answers("stream", ids)
            first = await phases.first_chunks("stream", ids, until - time.monotonic())
            solo = await phases.batch_window("solo", backlog_for(bound, span, 1.25), False)
            mixed = await phases.batch_window(
                "mixed", plan.mixed_backlog or backlog_for(bound, span, 1.5), True)
            streams = [audio.streams[rid] for rid in sorted(audio.streams)]
            invalid = audio.invalid
    finally:
        await worker.stop()
    return outcome(plan, bound, idle, streamed, first, solo, mixed, streams, invalid,
                    phases.notes)


def outcome(plan: Plan, bound: float, idle: Sample, streamed: Sample, first: Sample,
             solo: dict[str, Any], mixed: dict[str, Any], streams: list[Any], invalid: int,
             notes: list[str]) -> Outcome:
    loaded: Sample = mixed["e2e"]
    figures = lane_figures(idle, loaded, first, solo_rps=solo["rps"],
                           loaded_rps=mixed["rps"], first_chunk_cost_ms=FIRST_CHUNK_MS)
    figures["lanes_batch_queued_at_mixed_start"] = mixed["queued_at_start"]
    t = plan.answer_timeout_s

    def answered(sample: Sample) -> str:
        return f"{len(sample.answered_ms)} of {sample.count} (wait {t:.0f} s)"

    rows = [
        ["1 idle", "interactive", f"{RATE:.0f}/s for {plan.idle_s:.0f} s", answered(idle),
         idle.percentile(50), idle.percentile(99), "-"],
        ["2 streamed: result", "interactive, stream", f"{RATE:.0f}/s for {plan.stream_s:.0f} s",
         answered(streamed), streamed.percentile(50), streamed.percentile(99), "-"],
        ["2 streamed: first chunk", "interactive, stream", "same requests", answered(first),
         first.percentile(50), first.percentile(99), "-"],
        ["3 solo batch", "batch", f"{solo['queued_at_start']} queued", "-", "-", "-",
         solo["rps"]],
        ["4 mixed: interactive", "interactive",
         f"{RATE:.0f}/s for {plan.lead_s + plan.window_s:.0f} s", answered(loaded),
         loaded.percentile(50), loaded.percentile(99), "-"],
        ["4 mixed: batch", "batch", f"{mixed['queued_at_start']} queued", "-", "-", "-",
         mixed["rps"]],
    ]
    table = md_table(["phase", "lane", "offered", "answered", "p50 ms", "p99 ms",
                      "batch answers/s in the window"], rows)
    table += "\n\nWhere the interactive requests' time went (ms, p50 / p99; profile and " \
        "synthesis include the wait for an engine slot):\n\n" + md_table(
            ["phase", *STAGES], [["1 idle", *idle.stage_cells()],
                                 ["2 streamed", *streamed.stage_cells()],
                                 ["4 mixed", *loaded.stage_cells()]])
    table += "\n\n" + md_table(["figure", "target", "measured", "verdict"], verdicts(figures))
    chunks = [st.chunks for st in streams]
    notes = [*notes,
             f"one worker, defaults but the engine (bench: {CLIP_S:.0f}-s clips, RTF "
             f"{PER_AUDIO_SECOND_MS / 1000:.1f}, first chunk {FIRST_CHUNK_MS:.0f} ms, "
             f"{CHUNK_SECONDS} s a chunk); engine bound {bound:.0f} answers/s; batch window "
             f"{plan.window_s:.0f} s after a {plan.lead_s:.0f}-s lead; the mixed phase's "
             f"backlog: {mixed['queued_at_start']} lines queued at its start, "
             f"{mixed['left_at_end']} still queued when its window closed"]
    if streams:
        seconds = sum(st.audio_seconds for st in streams) / len(streams)
        finals = sum(1 for st in streams if st.status == "succeeded")
        restarted = sum(1 for st in streams if len(st.attempts) > 1)
        notes.append(f"tts.audio: {len(streams)} streams, {min(chunks)}-{max(chunks)} records "
                     f"each, {seconds:.2f} s of audio on average, {finals} final records "
                     f"`succeeded`, {restarted} with more than one attempt")
    if invalid:
        notes.append(f"tts.audio: {invalid} records without chunk headers")
    return Outcome("lanes", figures, table, notes=notes, series={
        "idle_ms": idle.answered_ms, "loaded_ms": loaded.answered_ms,
        "first_chunk_ms": first.answered_ms, "solo_answers": solo["answers"],
        "mixed_answers": mixed["answers"], "lead_s": plan.lead_s,
        "window_s": plan.window_s, "solo_rps": solo["rps"], "loaded_rps": mixed["rps"],
        "first_chunk_cost_ms": FIRST_CHUNK_MS, "idle_p99_ms": idle.percentile(99)})


def plot(series: dict[str, Any], ax: Any) -> None:
    """Left: latency CDFs (idle, loaded, first chunk); right: batch answers a second."""
    fig = ax.figure
    ax.remove()
    left, right = fig.subplots(1, 2)
    for key, label in (("idle_ms", "interactive, idle fleet"),
                       ("loaded_ms", "interactive, batch backlog"),
                       ("first_chunk_ms", "first chunk (streamed)")):
        values = sorted(series[key])
        if values:
            left.plot(values, [(i + 1) / len(values) for i in range(len(values))],
                      label=label)
    if series.get("idle_p99_ms"):
        left.axvline(1.5 * series["idle_p99_ms"], color="grey", ls="--",
                     label="1.5 x idle p99")
    left.axvline(series["first_chunk_cost_ms"] + 30, color="grey", ls=":",
                 label="first-chunk cost + 30 ms")
    left.set_xlabel("ms after the produce call")
    left.set_ylabel("fraction of requests")
    left.set_title("Interactive lane", fontsize=9)
    left.legend(fontsize=7)
    lead, window = series["lead_s"], series["window_s"]
    for key, label in (("solo_answers", f"solo ({series['solo_rps']}/s)"),
                       ("mixed_answers", f"with interactive ({series['loaded_rps']}/s)")):
        bins = [0] * math.ceil(lead + window)
        for t in series[key]:
            if 0 <= t < len(bins):
                bins[int(t)] += 1
        right.step(range(len(bins) + 1), [*bins, bins[-1]], where="post", label=label)
    right.axvspan(lead, lead + window, color="grey", alpha=0.15, label="window")
    right.set_xlabel("seconds after the backlog was produced")
    right.set_ylabel("batch answers a second")
    right.set_title("Batch lane", fontsize=9)
    right.legend(fontsize=7)
