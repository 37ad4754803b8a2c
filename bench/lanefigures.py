"""The lanes benchmark's pure parts: its request schedule and its figures from samples.

Schedule: `lane_text` (20 letters, unchanged by the text front end, so every clip lasts
exactly 20 x VF_BENCH_SECONDS_PER_CHAR; `bench.workload.bench_text`'s digits are read out as
words and make ~2.5-s clips) -> `lane_requests` (IDs, voices cycled, optionally streamed) ->
`paced_requests` (interactive requests at a rate for some seconds); `engine_bound_rps` (the
most answers a second the bench engine allows one worker) -> `backlog_for` (batch lines that
outlast a window even at that bound).
Figures: per interactive phase a `Sample` (latencies of the answered requests, and how many
got no answer in time) -> `Sample.percentile` (None when the percentile falls among the
unanswered: it is then longer than the wait, not a number) -> `rate_in` (batch answers a
second within a window) -> `lane_figures` (the flat JSON keys, ratios None where either side
is) -> `verdicts` against the issue's targets.
"""

from __future__ import annotations

import math
import string
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from bench.outcome import Figure
from bench.workload import TEXT_CHARS
from topics.events import SynthesisRequest

RATIO_TARGET = 1.5  # interactive p99 loaded / idle, at most (issue 14)
SHARE_TARGET = 0.8  # batch answers/s loaded / solo, at least
FIRST_CHUNK_OVERHEAD_TARGET_MS = 30.0  # first chunk beyond the engine's first-chunk cost


def lane_text(i: int) -> str:
    """TEXT_CHARS characters, different per i < 26**8, with no digits, capitals or
    abbreviations for the front end to expand: what the engine is given is this text."""
    if not 0 <= i < 26**8:
        raise ValueError(f"text index out of range: {i}")
    letters = ""
    for _ in range(8):
        i, digit = divmod(i, 26)
        letters = string.ascii_lowercase[digit] + letters
    text = f"Lanes text {letters}."
    assert len(text) == TEXT_CHARS
    return text


def lane_requests(count: int, voices: list[str], *, prefix: str, tag: str,
                  stream: bool = False) -> list[SynthesisRequest]:
    """`count` requests with unique IDs, to voices[i % len(voices)], texts `lane_text(i)`."""
    return [SynthesisRequest(request_id=f"{prefix}-{tag}-{i:06d}",
                             voice_id=voices[i % len(voices)], text=lane_text(i),
                             language="en", stream=stream) for i in range(count)]


def paced_requests(rate: float, seconds: float, voices: list[str], *, prefix: str, tag: str,
                   stream: bool = False) -> list[SynthesisRequest]:
    """round(rate * seconds) requests (at least one), for `Load.paced(..., rate)`: request i
    goes out i / rate seconds after the first, to voices[i % len(voices)]."""
    if rate <= 0 or seconds <= 0:
        raise ValueError(f"rate and seconds must be > 0, got {rate} and {seconds}")
    return lane_requests(max(1, round(rate * seconds)), voices, prefix=prefix, tag=tag,
                         stream=stream)


def engine_bound_rps(max_inflight: int, per_audio_second_ms: float, clip_s: float) -> float:
    """Answers a second one worker cannot exceed: `max_inflight` engine calls at once, each
    second of audio costing `per_audio_second_ms` (base and per-item cost 0, so a batch of n
    clips costs n times one: batching does not raise the bound)."""
    if max_inflight < 1 or per_audio_second_ms <= 0 or clip_s <= 0:
        raise ValueError("need max_inflight >= 1 and positive costs")
    return max_inflight * 1000.0 / (per_audio_second_ms * clip_s)


def backlog_for(bound_rps: float, seconds: float, margin: float = 1.5) -> int:
    """Batch lines that are not all answered within `seconds`, even at `bound_rps`."""
    if margin <= 1:
        raise ValueError(f"margin must be > 1 for the backlog to outlast the window: {margin}")
    return math.ceil(bound_rps * seconds * margin)


# Where an answered request's time went, from its result's `timings_ms`; publish is the
# rest of end to end (result produced and read back). `profile` and `synthesis` include the
# wait for an engine slot (the processor resolves and synthesizes under its device slots).
STAGES = ("queued", "profile", "synthesis", "encode", "upload", "publish")


@dataclass
class Sample:
    """End-to-end (or first-chunk) latencies of one phase's requests, in ms."""

    answered_ms: list[float] = field(default_factory=list)
    unanswered: int = 0  # no answer within the wait
    stages: dict[str, list[float]] = field(default_factory=dict)  # STAGES -> ms each

    def add_stages(self, e2e_ms: float, timings_ms: Mapping[str, float]) -> None:
        """One answered request's stage timings (see STAGES)."""
        for stage in STAGES:
            value = (e2e_ms - timings_ms.get("total", e2e_ms) if stage == "publish"
                     else timings_ms.get(stage, 0.0))
            self.stages.setdefault(stage, []).append(max(0.0, value))

    def stage_cells(self) -> list[str]:
        """`p50 / p99` per stage, '-' where none was answered."""
        cells = []
        for stage in STAGES:
            values = self.stages.get(stage, [])
            cells.append(f"{Sample(values).percentile(50):.1f} / "
                         f"{Sample(values).percentile(99):.1f}" if values else "-")
        return cells

    @classmethod
    def of(cls, ids: Iterable[str], sent: Mapping[str, float], arrived: Mapping[str, float],
           timings: Mapping[str, Mapping[str, float]] | None = None) -> Sample:
        """Latency (arrived - sent) of each ID, in ms; IDs without an arrival are
        unanswered. `sent` and `arrived` are wall times from the same process's clock;
        `timings`, each answer's `timings_ms` by ID, fills `stages`."""
        out = cls()
        for rid in ids:
            if rid in arrived:
                e2e = (arrived[rid] - sent[rid]) * 1000
                out.answered_ms.append(e2e)
                if timings is not None and rid in timings:
                    out.add_stages(e2e, timings[rid])
            else:
                out.unanswered += 1
        return out

    @property
    def count(self) -> int:
        return len(self.answered_ms) + self.unanswered

    def percentile(self, q: float) -> float | None:
        """The q-th percentile over all requests, the unanswered counted as longer than any
        answer (linear interpolation, as `bench.stats.percentile`); None where it needs an
        unanswered one, or when there are no requests."""
        n = self.count
        if n == 0:
            return None
        if not 0 <= q <= 100:
            raise ValueError(f"percentile must be within 0..100, got {q}")
        rank = (n - 1) * q / 100
        low = math.floor(rank)
        high = low if rank == low else low + 1
        ordered = sorted(self.answered_ms)
        if high >= len(ordered):
            return None
        return round(ordered[low] + (ordered[high] - ordered[low]) * (rank - low), 2)


def rate_in(times: Iterable[float], start: float, end: float) -> float:
    """Events a second with start <= t < end."""
    if end <= start:
        raise ValueError(f"empty window {start}..{end}")
    return round(sum(1 for t in times if start <= t < end) / (end - start), 2)


def ratio(numerator: float | None, denominator: float | None) -> float | None:
    if numerator is None or denominator is None or denominator <= 0:
        return None
    return round(numerator / denominator, 3)


def lane_figures(idle: Sample, loaded: Sample, first_chunk: Sample, *,
                 solo_rps: float | None, loaded_rps: float | None,
                 first_chunk_cost_ms: float) -> dict[str, Figure]:
    """The flat figures: interactive p50/p99 idle and loaded and their p99 ratio, batch
    answers/s solo and loaded and their share, time to the first chunk and its p99 beyond
    the engine's first-chunk cost; None wherever a percentile is not a number."""
    idle_p99, loaded_p99 = idle.percentile(99), loaded.percentile(99)
    first_p99 = first_chunk.percentile(99)
    return {
        "lanes_interactive_idle_p50_ms": idle.percentile(50),
        "lanes_interactive_idle_p99_ms": idle_p99,
        "lanes_interactive_loaded_p50_ms": loaded.percentile(50),
        "lanes_interactive_loaded_p99_ms": loaded_p99,
        "lanes_interactive_p99_ratio": ratio(loaded_p99, idle_p99),
        "lanes_batch_solo_rps": solo_rps,
        "lanes_batch_loaded_rps": loaded_rps,
        "lanes_batch_share": ratio(loaded_rps, solo_rps),
        "first_chunk_p50_ms": first_chunk.percentile(50),
        "first_chunk_p99_ms": first_p99,
        "first_chunk_overhead_p99_ms": (None if first_p99 is None
                                        else round(first_p99 - first_chunk_cost_ms, 2)),
        "lanes_interactive_idle_unanswered": idle.unanswered,
        "lanes_interactive_loaded_unanswered": loaded.unanswered,
        "first_chunk_unanswered": first_chunk.unanswered,
    }


def verdicts(figures: Mapping[str, Figure]) -> list[list[object]]:
    """Rows `figure | target | measured | verdict` for the issue's three targets."""

    def verdict(value: Figure, ok: bool) -> str:
        return "not measured" if value is None else ("met" if ok else "missed")

    ratio_v = figures.get("lanes_interactive_p99_ratio")
    share_v = figures.get("lanes_batch_share")
    over_v = figures.get("first_chunk_overhead_p99_ms")
    return [
        ["interactive p99 loaded / idle", f"<= {RATIO_TARGET}", ratio_v,
         verdict(ratio_v, ratio_v is not None and ratio_v <= RATIO_TARGET)],
        ["batch answers/s loaded / solo", f">= {SHARE_TARGET}", share_v,
         verdict(share_v, share_v is not None and share_v >= SHARE_TARGET)],
        ["first chunk p99 beyond the engine's first-chunk cost (ms)",
         f"<= {FIRST_CHUNK_OVERHEAD_TARGET_MS:.0f}", over_v,
         verdict(over_v, over_v is not None and over_v <= FIRST_CHUNK_OVERHEAD_TARGET_MS)],
    ]
