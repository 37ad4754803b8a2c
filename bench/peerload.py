"""Load and accounting for the peer benchmark, the same for both designs.

HttpLoad: one request event per POST to nginx, sent open-loop on an absolute schedule (a
slow answer never delays the next send), keep-alive connections, one try per request (the
retries are nginx's, `bench.nginx.NEXT_UPSTREAM`) -> per request: sent time, answer time,
verdict. Verdicts: ok (200, succeeded), failed (an answer that says the synthesis failed:
HTTP 422 here, a non-succeeded `tts.results` event for VoiceFactory), error (no answer: a
connection error, a timeout, any other status). account() turns (sent, answers) into one
row: lost = sent - answered (error or nothing), latency percentiles over ok answers,
throughput = ok answers / (last ok answer - first send). throughput_at_p99() picks, from
rows at rising offered loads, the highest throughput whose p99 stays within a bound.
profile_counts() reads `vf_profile_cache_total{result}` from Prometheus text. vf_path()
splits VoiceFactory's answers (only its results carry the stage timings a worker measured
from the request record on) into the way to the call, any wait for a slot, and the way back.
"""

from __future__ import annotations

import asyncio
import re
import time
from collections.abc import Callable, Coroutine, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from bench.stats import percentile
from topics.events import SynthesisRequest
from topics.events import encode as encode_event

OK, FAILED, ERROR = "ok", "failed", "error"


@dataclass(frozen=True)
class Answer:
    at: float  # wall time the answer (or the error) arrived
    verdict: str  # ok | failed | error
    detail: str = ""  # HTTP status or exception, for the report


def verdict_of(status: int) -> str:
    return OK if status == 200 else FAILED if status == 422 else ERROR


def account(sent: Mapping[str, float], answers: Mapping[str, Answer]) -> dict[str, Any]:
    """One row: counts, lost, p50/p99 of ok answers (ms), throughput of ok answers."""
    ok = {rid: a.at for rid, a in answers.items() if rid in sent and a.verdict == OK}
    failed = sum(1 for rid, a in answers.items() if rid in sent and a.verdict == FAILED)
    errors = sum(1 for rid, a in answers.items() if rid in sent and a.verdict == ERROR)
    latencies = [(ok[rid] - sent[rid]) * 1000 for rid in ok]
    span = (max(ok.values()) - min(sent.values())) if ok else 0.0
    return {"sent": len(sent), "ok": len(ok), "failed": failed, "errors": errors,
            "unanswered": len(sent) - len(ok) - failed - errors,
            "lost": len(sent) - len(ok) - failed,
            "throughput_rps": round(len(ok) / span, 2) if span > 0 else 0.0,
            "p50_ms": round(percentile(latencies, 50), 1) if latencies else None,
            "p99_ms": round(percentile(latencies, 99), 1) if latencies else None}


def throughput_at_p99(rows: Sequence[Mapping[str, Any]], bound_ms: float) -> float | None:
    """The highest throughput among rows with nothing lost and p99 <= bound_ms."""
    held = [r["throughput_rps"] for r in rows
            if r["p99_ms"] is not None and r["p99_ms"] <= bound_ms and r["lost"] == 0]
    return max(held) if held else None


_PROFILE_LINE = re.compile(r'^vf_profile_cache_total\{result="(\w+)"\}\s+([0-9.eE+-]+)\s*$')


def profile_counts(text: str) -> dict[str, float]:
    """hit / store / miss lookups from one process's /metrics text."""
    counts = {"hit": 0.0, "store": 0.0, "miss": 0.0}
    for line in text.splitlines():
        m = _PROFILE_LINE.match(line)
        if m:
            counts[m.group(1)] = float(m.group(2))
    return counts


def spilled_count(text: str) -> int:
    """Records this process's worker spilled (consumers/worker/spill.py), every lane, from
    its /metrics text."""
    return int(sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
                   if line.startswith("vf_spilled_total{")))


def builds(before: Mapping[str, float], after: Mapping[str, float]) -> dict[str, int]:
    """Profile lookups between two sums of profile_counts: builds are RAM misses."""
    d = {k: int(after.get(k, 0) - before.get(k, 0)) for k in ("hit", "store", "miss")}
    return {"lookups": sum(d.values()), "builds": d["store"] + d["miss"],
            "computed": d["miss"], "hits": d["hit"]}


class HttpLoad:
    """POSTs request events to `url` + /synthesize; one session, keep-alive."""

    def __init__(self, url: str, timeout_s: float = 120.0) -> None:
        self.url = url.rstrip("/") + "/synthesize"
        self._timeout_s = timeout_s
        self._session: Any = None
        self.sent: dict[str, float] = {}
        self.answers: dict[str, Answer] = {}

    async def __aenter__(self) -> HttpLoad:
        import aiohttp

        self._session = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(limit=0),  # open loop: never queue in the client
            timeout=aiohttp.ClientTimeout(total=self._timeout_s))
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self._session.close()

    async def one(self, request: SynthesisRequest) -> None:
        rid = request.request_id
        self.sent[rid] = time.time()
        try:
            async with self._session.post(self.url, data=encode_event(request),
                                          headers={"content-type": "application/json"}) as r:
                await r.read()
                self.answers[rid] = Answer(time.time(), verdict_of(r.status), str(r.status))
        except Exception as exc:  # a timeout, a reset, aiohttp.ClientError: no answer
            self.answers[rid] = Answer(time.time(), ERROR, type(exc).__name__)

    async def paced(self, requests: Sequence[SynthesisRequest], rate: float) -> None:
        await open_loop(requests, rate, self.one)


async def open_loop(requests: Sequence[SynthesisRequest], rate: float,
                    one: Callable[[SynthesisRequest], Coroutine[Any, Any, None]]) -> None:
    """`one(request)` for each, started at `rate` a second on an absolute schedule (a slow
    answer never delays the next start); returns when all are done."""
    start = time.monotonic()
    tasks: list[asyncio.Task[None]] = []
    for i, request in enumerate(requests):
        delay = start + i / rate - time.monotonic()
        if delay > 0:
            await asyncio.sleep(delay)
        tasks.append(asyncio.create_task(one(request)))
    await asyncio.gather(*tasks)


# A record's way to its worker takes a few ms (p99 ~5 ms on a quiet machine); a `queued`
# past this is a wait for a device slot at the worker the router chose.
WAITED_MS = 20.0
PATH_KEYS = ("queued_p50_ms", "queued_p99_ms", "back_p50_ms", "back_p99_ms", "waited")


def vf_path(answers: Iterable[tuple[float, float, Mapping[str, float]]]) -> dict[str, Any]:
    """Where a VoiceFactory answer's time went besides the engine, over (arrival, result
    produced at, the result's timings_ms) of ok answers: `queued` (request record ->
    its call starts: the Kafka hop, the fetch, any wait for a slot), `back` (result record
    -> the driver read it), and how many waited for a slot (queued > WAITED_MS): PATH_KEYS."""
    queued, back = [], []
    for arrival, produced_at, timings in answers:
        queued.append(timings.get("queued", 0.0))
        back.append(max(0.0, (arrival - produced_at) * 1000))
    if not queued:
        return {**dict.fromkeys(PATH_KEYS), "waited": 0}
    return {"queued_p50_ms": round(percentile(queued, 50), 1),
            "queued_p99_ms": round(percentile(queued, 99), 1),
            "back_p50_ms": round(percentile(back, 50), 1),
            "back_p99_ms": round(percentile(back, 99), 1),
            "waited": sum(1 for q in queued if q > WAITED_MS)}
