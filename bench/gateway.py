"""`voicefactory bench --only gateway`: the gateway's share of a caller's first byte.

    ctx.settings("gateway", every topic) + a keys file in the work dir
    -> bench.gateway_ttfb.run_requests: the gateway in-process on 127.0.0.1, its stand-in
       worker (FIRST_CHUNK_MS to the first chunk, then 0.2-s chunks every 50 ms, noting when
       it handed the first to its producer) and one HTTP client streaming COUNT requests a
       format, one after another on one keep-alive connection, as the OpenAI SDK sends them
    -> per format, the first chunk handed to the producer -> the first audio byte at the
       client: the produce, Kafka, the gateway's reply fetch, the encoder and HTTP.

The sections before this one read chunks from `tts.audio` themselves, so the HTTP part of a
caller's path was measured nowhere in the suite, and a 40-ms stall on every keep-alive
request (Nagle's algorithm on the gateway's sockets, 2026-12-05 to 12-07) went unseen for
two days. The target is issue 15's: at most 40 ms after the first chunk, every format.
"""

from __future__ import annotations

from typing import Any

from bench.gateway_ttfb import run_requests
from bench.harness import BenchContext
from bench.outcome import Outcome, md_table
from bench.stats import percentile
from consumers.gateway.speech import FORMATS
from topics.specs import ALL_TOPICS

COUNT = {True: 30, False: 100}  # requests per format: quick, full
FIRST_CHUNK_MS = 200.0
TARGET_MS = 40.0


async def run(ctx: BenchContext) -> Outcome:
    s = await ctx.settings("gateway", specs=ALL_TOPICS)
    prefix = s.kafka.topic_prefix
    s = s.with_overrides(gateway={
        "keys_file": str(ctx.work_dir / f"{prefix}keys"), "group_id": f"{prefix}gateway",
        "lag_threshold": 10**9})  # the stand-in commits nothing: its lag only grows
    count = COUNT[ctx.quick]
    after, _ = await run_requests(s, list(FORMATS), count, FIRST_CHUNK_MS / 1000)
    figures: dict[str, Any] = {}
    rows: list[list[object]] = []
    p99s: list[float | None] = []
    failed = 0
    for fmt in FORMATS:
        ms = after.get(fmt, [])
        p50 = round(percentile(ms, 50), 1) if ms else None
        p99 = round(percentile(ms, 99), 1) if ms else None
        figures[f"gateway_first_byte_p50_ms_{fmt}"] = p50
        figures[f"gateway_first_byte_p99_ms_{fmt}"] = p99
        p99s.append(p99)
        failed += count - len(ms)
        rows.append([fmt, len(ms), count - len(ms), p50, p99])
    known = [p for p in p99s if p is not None]
    figures["gateway_first_byte_p99_ms"] = max(known) if len(known) == len(p99s) else None
    figures["gateway_failed"] = failed
    figures["gateway_requests_per_format"] = count
    table = md_table(["format", "answered", "failed", "first byte p50 ms", "p99 ms"], rows)
    return Outcome("gateway", figures, table, series={"after_ms": after},
                   notes=[f"after the stand-in's first chunk ({FIRST_CHUNK_MS:.0f} ms in), "
                          f"{count} sequential requests a format on one keep-alive "
                          f"connection; target <= {TARGET_MS:.0f} ms at p99, every format"])


def plot(series: dict[str, Any], ax: Any) -> None:
    """First byte after the first chunk: a CDF per format, the target as a line."""
    for fmt, values in series["after_ms"].items():
        ordered = sorted(values)
        if ordered:
            ax.plot(ordered, [(i + 1) / len(ordered) for i in range(len(ordered))], label=fmt)
    ax.axvline(TARGET_MS, color="grey", ls="--", label=f"target {TARGET_MS:.0f} ms")
    ax.set_xlabel("first chunk produced -> first byte at the client (ms)")
    ax.set_ylabel("fraction of requests")
    ax.set_title("Gateway: a caller's first byte after the worker's first chunk")
    ax.legend()
