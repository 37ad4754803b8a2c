"""Usage on the real stack: a worker killed with -9 mid-stream, results delivered twice, the
aggregator killed and restarted on its changelog, and still each tenant's usage is the sum of
its distinct requests' durations (docs/usage.md).
"""

from __future__ import annotations

import asyncio
import os
import signal
import time
from datetime import datetime
from pathlib import Path

import pytest
from aiokafka import AIOKafkaProducer
from starlette.testclient import TestClient

from consumers.clients.demo import make_reference
from consumers.gateway.app import build_app
from consumers.gateway.keys import add_key
from consumers.gateway.runtime import Gateway
from consumers.settings import Settings
from consumers.wiring import make_store
from pipeline.answers import now_iso
from pipeline.usage import Usage, current_month, month_of, read_usage, report_source
from pipeline.voices import register_voice
from tests.integration.test_jobs import Aggregator
from tests.integration.test_worker import _read_all
from tests.integration.workers import duplicates, make_requests, produce, start_worker
from topics.events import AudioRef, SynthesisResult, decode_result, encode
from topics.specs import topic_names

pytestmark = [pytest.mark.integration, pytest.mark.timeout(420)]

PUBLISH_S = "1"


async def _wait_log(path: Path, text: str, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if path.exists() and text in path.read_text(errors="replace"):
            return
        await asyncio.sleep(0.2)
    raise AssertionError(f"{text!r} not in {path} after {timeout_s} s")


async def _results(settings: Settings) -> list[SynthesisResult]:
    topic = topic_names(settings.kafka.topic_prefix).results
    return [decode_result(v) for v in await _read_all(settings, topic, timeout_s=15)]


async def _until_answered(settings: Settings, wanted: set[str],
                          timeout_s: float) -> list[SynthesisResult]:
    deadline = time.monotonic() + timeout_s
    while True:
        results = await _results(settings)
        done = {r.request_id for r in results if r.status == "succeeded"}
        if wanted <= done:
            return results
        assert time.monotonic() < deadline, f"{len(wanted - done)} requests never succeeded"
        await asyncio.sleep(1)


async def _produce_results(settings: Settings, results: list[SynthesisResult]) -> None:
    """Results straight onto tts.results, keyed as the worker keys them."""
    producer = AIOKafkaProducer(bootstrap_servers=settings.kafka.bootstrap, acks="all")
    await producer.start()
    try:
        topic = topic_names(settings.kafka.topic_prefix).results
        for r in results:
            await producer.send_and_wait(topic, encode(r), key=r.result_key())
    finally:
        await producer.stop()


def _expected(results: list[SynthesisResult], tenant: str) -> dict[str, float]:
    """Per month: the sum of the tenant's distinct succeeded requests' durations (every copy
    of one request has the same audio, checked here, so which copy counts does not matter)."""
    first: dict[str, SynthesisResult] = {}
    for r in results:
        if r.status != "succeeded" or r.audio is None or (r.tenant or "default") != tenant:
            continue
        seen = first.setdefault(r.request_id, r)
        assert seen.audio is not None and seen.audio.duration_s == r.audio.duration_s
    months: dict[str, float] = {}
    for r in first.values():
        assert r.audio is not None
        month = month_of(datetime.fromisoformat(r.completed_at))
        months[month] = months.get(month, 0.0) + r.audio.duration_s
    return months


async def _usage_reaches(settings: Settings, tenant: str, expected: dict[str, float],
                         timeout_s: float, agg: Aggregator, *,
                         engine_s: float | None = None) -> dict[str, Usage]:
    """The tenant's published usage once its audio seconds (and, given, its engine seconds
    over all months) are the expected ones; fails after `timeout_s`."""
    store = make_store(settings.store)
    source = report_source(settings.kafka.topic_prefix)
    deadline = time.monotonic() + timeout_s
    while True:
        got = {m: await asyncio.to_thread(read_usage, store, tenant, m, source)
               for m in expected}
        engine = sum(u.engine_s for u in got.values())
        if all(abs(got[m].audio_s - v) < 0.01 for m, v in expected.items()) and (
                engine_s is None or abs(engine - engine_s) < 0.01):
            return got
        assert time.monotonic() < deadline, \
            f"{tenant}: usage {[(m, u.audio_s, u.engine_s) for m, u in got.items()]}, " \
            f"expected {expected} (engine {engine_s})\n{agg.tail()}"
        await asyncio.sleep(0.5)


def _fake(request_id: str, duration: float, tenant: str, *, attempt: int = 1,
          rtf: float | None = 0.5) -> SynthesisResult:
    audio = AudioRef(bucket="b", key=f"tenants/{tenant}/audio/{request_id}.wav", url="http://x",
                     format="wav", sample_rate=22050, duration_s=duration, bytes=100,
                     sha256="0" * 64)
    return SynthesisResult(request_id=request_id, voice_id="voice-000", status="succeeded",
                           completed_at=now_iso(), audio=audio, tenant=tenant, rtf=rtf,
                           attempt=attempt)


def _gateway_reads_it(settings: Settings, tmp_path: Path, got: dict[str, Usage]) -> None:
    """The gateway over the same store (its lifespan, and so Kafka, not entered): the
    tenant's GET /v1/usage, and a quota the usage has reached refuses speech."""
    month = current_month()
    if month not in got:  # the run straddled a month's end: nothing of this month to show
        return
    keys = tmp_path / "gateway-keys"
    capped = add_key(keys, "default", rate=100, streams=2, monthly_audio_s=got[month].audio_s)
    roomy = add_key(keys, "default", rate=100, streams=2,
                    monthly_audio_s=got[month].audio_s + 1000)
    gateway = Gateway(settings.with_overrides(gateway={"keys_file": str(keys)}))
    http = TestClient(build_app(gateway))
    answer = http.get("/v1/usage", headers={"Authorization": f"Bearer {roomy}"}).json()
    assert answer["audio_seconds"] == pytest.approx(got[month].audio_s, abs=0.01)
    assert answer["requests"] == got[month].requests
    assert answer["remaining_audio_seconds"] == pytest.approx(1000, abs=0.01)
    body = {"model": "tts-1", "voice": "voice-000", "input": "Over the quota."}
    refused = http.post("/v1/audio/speech", json=body,
                        headers={"Authorization": f"Bearer {capped}"})
    assert refused.status_code == 429, refused.text
    assert refused.json()["error"]["code"] == "quota_exceeded"


async def test_usage_counts_each_request_once_through_kill_9s_and_redeliveries(
        settings: Settings, tmp_path: Path) -> None:
    reference = make_reference(tmp_path / "reference.wav")
    store = make_store(settings.store)
    for i in range(10):
        register_voice(store, voice_id=f"voice-{i:03d}", reference=reference, prompt_text=None,
                       language="en")
    aggregator = Aggregator(settings, tmp_path)
    env = {"VF_ENGINE": "bench", "VF_BENCH_BASE_MS": "40", "VF_MAX_BATCH": "4",
           "VF_USAGE_PUBLISH_S": PUBLISH_S}
    requests = make_requests(80, voices=10, prefix="u")
    # Another tenant's results, produced by hand with copies: a retried attempt and a
    # replay, and one request ID that the default tenant uses too.
    acme = [_fake("acme-1", 2.5, "acme"), _fake("acme-2", 1.25, "acme", rtf=None),
            _fake(requests[0].request_id, 4.0, "acme")]
    acme_copies = [_fake("acme-1", 2.5, "acme", attempt=2), _fake("acme-2", 1.25, "acme"),
                   acme[0]]
    aggregator.settings = settings.with_overrides(aggregator={"usage_publish_s": 1.0})
    aggregator.start()
    first = start_worker(settings, "usage-a", tmp_path / "a.log", **env)
    second = None
    try:
        await aggregator.ready()
        await _wait_log(tmp_path / "a.log", "assigned partitions", 60)
        await produce(settings, requests)
        await _produce_results(settings, acme)
        await _wait_log(tmp_path / "a.log", "succeeded", 60)
        await asyncio.sleep(1.0)
        os.kill(first.pid, signal.SIGKILL)  # mid-stream: its uncommitted answers come twice
        first.wait(10)
        # The aggregator too, after it counted some: its changelog must not count them again.
        aggregator.kill()
        await _produce_results(settings, acme_copies)
        aggregator.start()
        second = start_worker(settings, "usage-b", tmp_path / "b.log", **env)
        await aggregator.ready()
        results = await _until_answered(settings, {r.request_id for r in requests}, 180)
        # Copies of a third of the answers, as a producer retrying its sends would make.
        replayed = [r for r in results if (r.tenant or "default") == "default"
                    and r.status == "succeeded"][::3]
        await _produce_results(settings, replayed)
        results = await _results(settings)
        assert duplicates(results) >= len(replayed) + len(acme_copies)

        expected = _expected(results, "default")
        got = await _usage_reaches(settings, "default", expected, 120, aggregator)
        # acme's audio seconds were complete before the kill (its copies add none), so the
        # old report already shows them: wait for the engine seconds a copy brings as well.
        acme_usage = await _usage_reaches(settings, "acme", _expected(results, "acme"), 60,
                                          aggregator, engine_s=7.75 * 0.5)
        # Settled, not passing through: two publish intervals later nothing more was added.
        await asyncio.sleep(3 * float(PUBLISH_S))
        again = await _usage_reaches(settings, "default", expected, 1, aggregator)
        assert {m: u.audio_s for m, u in again.items()} == {m: u.audio_s for m, u in got.items()}
        assert sum(u.requests for u in got.values()) == len(requests)
        assert sum(u.engine_s for u in got.values()) > 0
        assert sum(u.requests for u in acme_usage.values()) == 3
        assert sum(u.audio_s for u in acme_usage.values()) == pytest.approx(7.75)
        # acme-2's first copy had no rtf; its replayed copy brought the engine seconds
        assert sum(u.engine_s for u in acme_usage.values()) == pytest.approx(7.75 * 0.5)
        _gateway_reads_it(settings, tmp_path, got)
    finally:
        for proc in (first, second):
            if proc is not None and proc.poll() is None:
                proc.terminate()
                proc.wait(60)
        if aggregator.proc is not None and aggregator.proc.poll() is None:
            assert aggregator.stop() == 0, aggregator.tail()
