"""The gateway in-process on 127.0.0.1 (uvicorn), and a fake worker for its reply path.

`RunningGateway`: `Gateway` + `build_app` served by uvicorn on a free port (and its ops
listener on another), on the test's event loop, ready once it holds reply partitions.
`FakeStreamingWorker` is NOT the real worker: it stands in for the streaming worker (branch
`stream`) so the gateway's side of the contract can be tested now. It reads
tts.requests.interactive and answers each request with chunk records on the partition
named by `vf-reply-partition`, shaped by the request text:
"fail" -> a failed final record, "restart" -> attempt a, then attempt b from seq 0,
"slow" -> one chunk every 200 ms for 10 s (disconnect tests), "pause" -> one every 300 ms
for 3 s (rebalance tests), else 3 chunks + final.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import os
import socket
import struct
import sys
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path

import httpx
from aiokafka import TopicPartition

from consumers.gateway import ops
from consumers.gateway.app import build_app
from consumers.gateway.keys import KeyRing
from consumers.gateway.runtime import Gateway
from consumers.kafka import make_consumer, make_producer
from consumers.settings import Settings
from topics.chunks import chunk_headers, reply_partition
from topics.events import SynthesisRequest
from topics.specs import REQUESTS_INTERACTIVE
from topics.validation import decode_request

FAKE_RATE = 22050  # not 24 kHz: `pcm` answers are resampled by ffmpeg


def tone(seconds: float, rate: int = FAKE_RATE, hz: float = 220.0) -> bytes:
    count = int(seconds * rate)
    return struct.pack(f"<{count}h", *(int(8000 * math.sin(2 * math.pi * hz * i / rate))
                                       for i in range(count)))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextlib.asynccontextmanager
async def cli_gateway(settings: Settings, *, log: Path | None = None, ready_s: float = 30.0,
                      ) -> AsyncIterator[tuple[asyncio.subprocess.Process, str]]:
    """`voicefactory gateway` as its own process (one a test can kill -9), on a free port,
    ready within `ready_s`: yields the process and its base URL; kills it at the end if it
    still runs. Its stdout and stderr go to `log` when given (appended), else nowhere."""
    port, ops_port = free_port(), free_port()
    env = {**os.environ, **settings.to_env(), "VF_GATEWAY_PORT": str(port),
           "VF_GATEWAY_OPS_PORT": str(ops_port), "VF_GATEWAY_HOST": "127.0.0.1",
           "VF_INSTANCE_ID": "doomed"}
    out = await asyncio.to_thread(log.open, "ab") if log is not None else None
    try:
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-c", "import sys, voicefactory; sys.exit(voicefactory.main("
            "['gateway', '--log-format', 'text']))", env=env,
            stdout=out if out is not None else asyncio.subprocess.DEVNULL,
            stderr=asyncio.subprocess.STDOUT)
    finally:
        if out is not None:
            out.close()  # the child holds its own copy
    url = f"http://127.0.0.1:{port}"
    try:
        async with httpx.AsyncClient() as http:
            deadline = time.monotonic() + ready_s
            while True:
                with contextlib.suppress(httpx.HTTPError):
                    ready = await http.get(f"http://127.0.0.1:{ops_port}/readyz")
                    if ready.status_code == 200:
                        break
                if time.monotonic() > deadline or proc.returncode is not None:
                    raise AssertionError("the subprocess gateway never became ready")
                await asyncio.sleep(0.1)
        yield proc, url
    finally:
        if proc.returncode is None:
            proc.kill()
        await proc.wait()


class RunningGateway:
    """The API on `url` and /healthz, /readyz, /metrics on `ops_url`, one uvicorn server
    over two loopback sockets as `voicefactory gateway` runs it (consumers.gateway.ops)."""

    def __init__(self, settings: Settings, keyring: KeyRing) -> None:
        self.gateway = Gateway(settings, keyring=keyring)
        self.server, self.sockets = ops.server(build_app(self.gateway),
                                               ops.build_ops_app(self.gateway),
                                               host="127.0.0.1", port=0, ops_port=0)
        self.port, self.ops_port = (int(s.getsockname()[1]) for s in self.sockets)
        self.task: asyncio.Task[None] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def ops_url(self) -> str:
        return f"http://127.0.0.1:{self.ops_port}"

    async def __aenter__(self) -> RunningGateway:
        self.task = asyncio.create_task(self.server.serve(sockets=self.sockets))
        for _ in range(300):
            if self.server.started and self.gateway.router.partitions:
                return self
            await asyncio.sleep(0.1)
        raise TimeoutError("gateway did not get reply partitions within 30 s")

    async def __aexit__(self, *exc: object) -> None:
        self.server.should_exit = True
        assert self.task is not None
        try:
            await asyncio.wait_for(self.task, 30)
        finally:
            for sock in self.sockets:
                sock.close()


@dataclass
class FakeStreamingWorker:
    settings: Settings
    seen: list[tuple[SynthesisRequest, int | None]] = field(default_factory=list)
    _task: asyncio.Task[None] | None = None
    _answers: set[asyncio.Task[None]] = field(default_factory=set)

    async def __aenter__(self) -> FakeStreamingWorker:
        self._task = asyncio.create_task(self._run())
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._task is not None
        for task in [self._task, *self._answers]:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    async def _run(self) -> None:
        topic = self.settings.kafka.topic_prefix + REQUESTS_INTERACTIVE.name
        audio = self.settings.kafka.topic_prefix + "tts.audio"
        consumer = make_consumer(self.settings.kafka, group_id=None,
                                 auto_offset_reset="earliest", enable_auto_commit=False)
        producer = make_producer(self.settings.kafka, linger_ms=0)
        await consumer.start()
        await producer.start()
        try:
            consumer.assign([TopicPartition(topic, p)
                             for p in range(REQUESTS_INTERACTIVE.partitions)])
            while True:
                batches = await consumer.getmany(timeout_ms=100)
                for records in batches.values():
                    for rec in records:
                        request = decode_request(rec.value)
                        partition = reply_partition(list(rec.headers))
                        self.seen.append((request, partition))
                        task = asyncio.create_task(
                            self._answer(producer, audio, request, partition))
                        self._answers.add(task)
                        task.add_done_callback(self._answers.discard)
        finally:
            await consumer.stop()
            await producer.stop()

    async def _answer(self, producer: object, topic: str, request: SynthesisRequest,
                      partition: int | None) -> None:
        from aiokafka import AIOKafkaProducer

        assert isinstance(producer, AIOKafkaProducer)
        key = request.request_id.encode()

        async def chunk(seq: int, data: bytes, *, attempt: str = "a", final: bool = False,
                        status: str | None = None, error: str | None = None) -> None:
            await producer.send_and_wait(
                topic, data, key=key, partition=partition,
                headers=chunk_headers(seq=seq, attempt=attempt, sample_rate=FAKE_RATE,
                                      final=final, status=status, error=error))

        if "fail" in request.text:
            await chunk(0, b"", final=True, status="failed", error="engine_error")
        elif "silent" in request.text:  # a faulty worker: success without any audio
            await chunk(0, b"", final=True, status="succeeded")
        elif "restart" in request.text:
            await chunk(0, tone(0.2))
            await chunk(0, tone(0.2), attempt="b")
            await chunk(1, tone(0.2), attempt="b", final=True, status="succeeded")
        elif "slow" in request.text or "pause" in request.text:
            count, gap = (50, 0.2) if "slow" in request.text else (10, 0.3)
            for seq in range(count):
                await chunk(seq, tone(0.2))
                await asyncio.sleep(gap)
            await chunk(count, b"", final=True, status="succeeded")
        else:
            for seq in range(3):
                await chunk(seq, tone(0.3))
            await chunk(3, tone(0.1), final=True, status="succeeded")
