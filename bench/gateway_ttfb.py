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
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import math
import socket
import struct
import tempfile
import time
import uuid
from pathlib import Path

import httpx
import uvicorn
from aiokafka import AIOKafkaProducer, TopicPartition

from consumers.gateway.app import build_app
from consumers.gateway.keys import KeyRing, add_key
from consumers.gateway.runtime import Gateway
from consumers.kafka import make_consumer, make_producer, security_kwargs
from consumers.settings import GatewaySettings, Settings
from consumers.wiring import make_store
from pipeline import keys as object_keys
from topics.admin import admin_client, create_topics
from topics.chunks import chunk_headers, reply_partition
from topics.events import SynthesisRequest, VoiceRegistration, encode
from topics.specs import REQUESTS_INTERACTIVE
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
                self.first_sent[request.request_id] = time.monotonic()
            final = seq == 3
            await producer.send_and_wait(
                topic, b"" if final else _chunk(0.2), key=key, partition=partition,
                headers=chunk_headers(seq=seq, attempt="a", sample_rate=RATE, final=final,
                                      status="succeeded" if final else None))
            await asyncio.sleep(0.05)


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def measure(settings: Settings, formats: list[str], count: int,
                  first_chunk_s: float) -> dict[str, list[float]]:
    admin = admin_client(settings.kafka.bootstrap, **security_kwargs(settings.kafka))
    await admin.start()
    try:
        await create_topics(admin, prefix=settings.kafka.topic_prefix)
    finally:
        await admin.close()
    store = make_store(settings.store)
    store.put(object_keys.voice_json_key(VOICE), encode(VoiceRegistration(
        voice_id=VOICE, reference=f"s3://{store.bucket}/none", sha256="0" * 64,
        created_at="2026-01-01T00:00:00+00:00")), "application/json")
    key = add_key(settings.gateway.keys_path(), "bench", rate=1e6, streams=100)
    worker = StandInWorker(settings, first_chunk_s)
    worker_task = asyncio.create_task(worker.run())
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = int(s.getsockname()[1])
    server = uvicorn.Server(uvicorn.Config(
        build_app(Gateway(settings, keyring=KeyRing(settings.gateway.keys_path()))),
        host="127.0.0.1", port=port, log_config=None, access_log=False))
    server_task = asyncio.create_task(server.serve())
    results: dict[str, list[float]] = {}
    try:
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=30) as http:
            for _ in range(300):
                if await _ready(http):
                    break
                await asyncio.sleep(0.1)
            for fmt in formats:
                results[fmt] = []
                for i in range(count):
                    try:
                        results[fmt].append(await _one(http, key, fmt, i, worker))
                    except (httpx.HTTPError, KeyError) as exc:  # counted, not fatal
                        print(f"{fmt} request {i} failed: {type(exc).__name__}: {exc}")
    finally:
        server.should_exit = True
        await server_task
        worker_task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await worker_task
        store.delete(object_keys.voice_json_key(VOICE))
    return results


async def _ready(http: httpx.AsyncClient) -> bool:
    with contextlib.suppress(httpx.HTTPError):
        return (await http.get("/readyz")).status_code == 200
    return False


async def _one(http: httpx.AsyncClient, key: str, fmt: str, i: int,
               worker: StandInWorker) -> float:
    body = {"model": "tts-1", "voice": VOICE, "input": f"Line {i}.", "response_format": fmt,
            "stream_format": "audio"}
    first: float | None = None
    async with http.stream("POST", "/v1/audio/speech", json=body,
                           headers={"Authorization": f"Bearer {key}"}) as response:
        response.raise_for_status()
        request_id = response.headers["x-request-id"]
        async for _ in response.aiter_raw():
            first = first if first is not None else time.monotonic()
    assert first is not None
    return (first - worker.first_sent[request_id]) * 1000


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.gateway_ttfb", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--format", nargs="+", default=["pcm", "mp3", "opus", "aac", "flac",
                                                        "wav"])
    parser.add_argument("--count", type=int, default=200)
    parser.add_argument("--first-chunk-ms", type=float, default=200.0)
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
        results = asyncio.run(measure(settings, args.format, args.count,
                                      args.first_chunk_ms / 1000))
    print(f"first chunk produced -> first byte at the client, {args.count} requests each, "
          f"engine first chunk {args.first_chunk_ms:.0f} ms")
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
