"""The gateway's share of time to first byte: `python -m bench.gateway_ttfb [--format mp3 ...]`.

What it measures (issue 15's "time to first byte minus the engine's first-chunk time"): for
each request, from the moment the first chunk record is handed to the producer to the moment
the HTTP client holds the first byte of the answer. That is the worker's produce, Kafka, the
gateway's fetch from its reply partition, encoding and HTTP.

Flow: VF_* settings (the running local stack) -> fresh topics under a unique prefix, a
voice.json, a keys file -> the gateway in-process on 127.0.0.1 (uvicorn) -> `StandInWorker`
(NOT the real worker: it answers each interactive request after `--first-chunk-ms`, as an
engine would, with 0.2 s chunks every 50 ms, noting when it produced the first) -> an HTTP
client streams `--count` requests one after another per format -> percentiles printed. The
topics' records expire with their retention; the voice.json is deleted at the end.

`--worker real` puts the real worker there instead (`build_worker`, the bench engine with
VF_BENCH_FIRST_CHUNK_MS = `--first-chunk-ms`, a voice registered from an espeak-ng reference).
Its first chunk's moment is the Kafka CreateTime of the seq-0 record on tts.audio (the
producer stamps it when the record is handed over; 1-ms resolution), read by `AudioWatch`. It
also prints the whole time to first byte (request sent -> first byte) less `--first-chunk-ms`,
which adds the request's way in: gateway produce, the worker's fetch and turn, engine setup.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import math
import os
import struct
import tempfile
import time
import uuid
from pathlib import Path

import httpx
from aiokafka import AIOKafkaProducer, TopicPartition

from bench.scratch import scratch_topics
from consumers.gateway import ops
from consumers.gateway.app import build_app
from consumers.gateway.keys import KeyRing, add_key
from consumers.gateway.runtime import Gateway
from consumers.kafka import make_consumer, make_producer
from consumers.settings import GatewaySettings, Settings
from consumers.wiring import WorkerRuntime, build_worker, make_store
from pipeline import keys as object_keys
from topics.chunks import chunk_headers, read_chunk, reply_partition
from topics.events import SynthesisRequest, VoiceRegistration, encode
from topics.specs import ALL_TOPICS, AUDIO, REQUESTS_INTERACTIVE
from topics.tenancy import DEFAULT_TENANT
from topics.validation import decode_request

RATE = 24_000
VOICE = "bench-gateway-voice"


def _chunk(seconds: float) -> bytes:
    count = int(seconds * RATE)
    return struct.pack(f"<{count}h", *(int(8000 * math.sin(i / 10)) for i in range(count)))


class StandInWorker:
    """Answers interactive requests with chunk records; a stand-in, not the real worker."""

    def __init__(self, settings: Settings, first_chunk_s: float) -> None:
        self.settings = settings
        self.first_chunk_s = first_chunk_s
        self.first_sent: dict[str, float] = {}
        self._tasks: set[asyncio.Task[None]] = set()

    async def run(self) -> None:
        prefix = self.settings.kafka.topic_prefix
        consumer = make_consumer(self.settings.kafka, group_id=None, fetch_max_wait_ms=5,
                                 auto_offset_reset="earliest")
        producer = make_producer(self.settings.kafka, linger_ms=0)
        await consumer.start()
        await producer.start()
        try:
            consumer.assign([TopicPartition(prefix + REQUESTS_INTERACTIVE.name, p)
                             for p in range(REQUESTS_INTERACTIVE.partitions)])
            while True:
                for records in (await consumer.getmany(timeout_ms=50)).values():
                    for rec in records:
                        task = asyncio.create_task(self._answer(
                            producer, decode_request(rec.value), reply_partition(rec.headers)))
                        self._tasks.add(task)
                        task.add_done_callback(self._tasks.discard)
        finally:
            await consumer.stop()
            await producer.stop()

    async def _answer(self, producer: AIOKafkaProducer, request: SynthesisRequest,
                      partition: int | None) -> None:
        topic = self.settings.kafka.topic_prefix + "tts.audio"
        key = request.request_id.encode()
        await asyncio.sleep(self.first_chunk_s)  # the engine working towards its first chunk
        for seq in range(4):
            if seq == 0:
                self.first_sent[request.request_id] = time.time()
            final = seq == 3
            await producer.send_and_wait(
                topic, b"" if final else _chunk(0.2), key=key, partition=partition,
                headers=chunk_headers(seq=seq, attempt="a", sample_rate=RATE, final=final,
                                      status="succeeded" if final else None))
            await asyncio.sleep(0.05)


class AudioWatch:
    """Notes when the real worker produced each request's first chunk (record CreateTime)."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.first_sent: dict[str, float] = {}

    async def run(self) -> None:
        topic = self.settings.kafka.topic_prefix + "tts.audio"
        consumer = make_consumer(self.settings.kafka, group_id=None, fetch_max_wait_ms=5,
                                 auto_offset_reset="earliest")
        await consumer.start()
        try:
            consumer.assign([TopicPartition(topic, p) for p in range(AUDIO.partitions)])
            while True:
                for records in (await consumer.getmany(timeout_ms=50)).values():
                    for rec in records:
                        chunk = read_chunk(rec.key, rec.value, list(rec.headers))
                        if chunk.seq == 0:
                            self.first_sent.setdefault(chunk.request_id, rec.timestamp / 1000)
        finally:
            await consumer.stop()


def _real_worker(settings: Settings, first_chunk_s: float, tmp: Path) -> WorkerRuntime:
    from consumers.clients.demo import REFERENCE_TEXT, make_reference
    from pipeline.voices import register_voice

    os.environ["VF_BENCH_FIRST_CHUNK_MS"] = str(first_chunk_s * 1000)  # read by build_worker
    reference = make_reference(tmp / "reference.wav")
    register_voice(make_store(settings.store), voice_id=VOICE, reference=reference,
                   prompt_text=REFERENCE_TEXT, language="en")
    prefix = settings.kafka.topic_prefix
    return build_worker(settings.with_overrides(
        engine={"name": "bench"},
        worker={"group_id": f"vf-synth-{prefix}", "instance_id": f"{prefix}worker",
                "metrics_port": 0}))


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def measure(settings: Settings, formats: list[str], count: int, first_chunk_s: float,
                  real: bool = False) -> tuple[dict[str, list[float]], dict[str, list[float]]]:
    """Per format: first chunk produced -> first byte (ms), and request sent -> first byte
    less the engine's first chunk (ms). The topics live under the settings' prefix for the
    measurement's length."""
    async with scratch_topics(settings.kafka, settings.kafka.topic_prefix, ALL_TOPICS):
        return await run_requests(settings, formats, count, first_chunk_s, real)


async def run_requests(settings: Settings, formats: list[str], count: int,
                       first_chunk_s: float, real: bool = False,
                       ) -> tuple[dict[str, list[float]], dict[str, list[float]]]:
    """measure() on topics that exist already (`voicefactory bench --only gateway` makes
    them with the run's others)."""
    store = make_store(settings.store)
    runtime: WorkerRuntime | None = None
    worker: StandInWorker | AudioWatch
    if real:
        runtime = _real_worker(settings, first_chunk_s, settings.gateway.keys_path().parent)
        worker = AudioWatch(settings)
    else:
        store.put(object_keys.voice_json_key(VOICE), encode(VoiceRegistration(
            voice_id=VOICE, reference=f"s3://{store.bucket}/none", sha256="0" * 64,
            created_at="2026-01-01T00:00:00+00:00")), "application/json")
        worker = StandInWorker(settings, first_chunk_s)
    # The default tenant's key: the voice above (and the real worker's) is the default
    # tenant's, and a key of another tenant is told it does not exist (404).
    key = add_key(settings.gateway.keys_path(), DEFAULT_TENANT, rate=1e6, streams=100)
    worker_task = asyncio.create_task(worker.run())
    real_task = asyncio.create_task(runtime.worker.run()) if runtime is not None else None
    gateway = Gateway(settings, keyring=KeyRing(settings.gateway.keys_path()))
    # The API and the ops listener (/readyz) on free loopback ports (consumers.gateway.ops).
    server, sockets = ops.server(build_app(gateway), ops.build_ops_app(gateway),
                                 host="127.0.0.1", port=0, ops_port=0)
    port, ops_port = (int(s.getsockname()[1]) for s in sockets)
    server_task = asyncio.create_task(server.serve(sockets=sockets))
    results: dict[str, list[float]] = {}
    whole: dict[str, list[float]] = {}
    try:
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=30) as http:
            for _ in range(300):
                if await _ready(http, f"http://127.0.0.1:{ops_port}"):
                    break
                await asyncio.sleep(0.1)
            if real:  # the worker's first turn (group join, profile) is no request's share
                await _one(http, key, "pcm", -1, worker)
            for fmt in formats:
                results[fmt], whole[fmt] = [], []
                for i in range(count):
                    try:
                        after_chunk, ttfb = await _one(http, key, fmt, i, worker)
                        results[fmt].append(after_chunk)
                        whole[fmt].append(ttfb - first_chunk_s * 1000)
                    except (httpx.HTTPError, KeyError) as exc:  # counted, not fatal
                        print(f"{fmt} request {i} failed: {type(exc).__name__}: {exc}")
    finally:
        server.should_exit = True
        await server_task
        worker_task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await worker_task
        if runtime is not None and real_task is not None:
            runtime.worker.stop()
            await asyncio.wait_for(real_task, 60)
        store.delete(object_keys.voice_json_key(VOICE))
    return results, whole


async def _ready(http: httpx.AsyncClient, ops_url: str) -> bool:
    with contextlib.suppress(httpx.HTTPError):
        return (await http.get(ops_url + "/readyz")).status_code == 200
    return False


async def _one(http: httpx.AsyncClient, key: str, fmt: str, i: int,
               worker: StandInWorker | AudioWatch) -> tuple[float, float]:
    body = {"model": "tts-1", "voice": VOICE, "input": f"Line {i}.", "response_format": fmt,
            "stream_format": "audio"}
    first: float | None = None
    sent = time.time()
    async with http.stream("POST", "/v1/audio/speech", json=body,
                           headers={"Authorization": f"Bearer {key}"}) as response:
        response.raise_for_status()
        request_id = response.headers["x-request-id"]
        async for _ in response.aiter_raw():
            first = first if first is not None else time.time()
    assert first is not None
    return (first - worker.first_sent[request_id]) * 1000, (first - sent) * 1000


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.gateway_ttfb", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--format", nargs="+", default=["pcm", "mp3", "opus", "aac", "flac",
                                                        "wav"])
    parser.add_argument("--count", type=int, default=200)
    parser.add_argument("--first-chunk-ms", type=float, default=200.0)
    parser.add_argument("--worker", choices=["stand-in", "real"], default="stand-in",
                        help="who answers: the stand-in (default) or the real worker with "
                             "the bench engine")
    args = parser.parse_args()
    base = Settings.from_env()
    prefix = f"bench-gw-{uuid.uuid4().hex[:6]}."
    with tempfile.TemporaryDirectory() as tmp:
        settings = Settings(kafka=base.kafka.__class__(**{**vars(base.kafka),
                                                          "topic_prefix": prefix}),
                            store=base.store, worker=base.worker,
                            # the stand-in commits nothing: its lag only grows
                            gateway=GatewaySettings(keys_file=str(Path(tmp) / "keys"),
                                                    group_id=f"vf-gateway-{prefix}",
                                                    lag_threshold=10**9))
        results, whole = asyncio.run(measure(settings, args.format, args.count,
                                             args.first_chunk_ms / 1000, args.worker == "real"))
    print(f"{args.worker} worker, {args.count} requests each, engine first chunk "
          f"{args.first_chunk_ms:.0f} ms")
    _table("first chunk produced -> first byte at the client", results)
    _table(f"request sent -> first byte, less {args.first_chunk_ms:.0f} ms", whole)


def _table(title: str, results: dict[str, list[float]]) -> None:
    print(title)
    print(f"{'format':<8}{'ok':>5}{'p50 ms':>9}{'p90 ms':>9}{'p99 ms':>9}{'max ms':>9}")
    for fmt, values in results.items():
        if not values:
            print(f"{fmt:<8}{0:>5}  every request failed")
            continue
        print(f"{fmt:<8}{len(values):>5}{_percentile(values, 0.5):>9.1f}"
              f"{_percentile(values, 0.9):>9.1f}{_percentile(values, 0.99):>9.1f}"
              f"{max(values):>9.1f}")


if __name__ == "__main__":
    main()
