"""The model server's ASGI app, served by real uvicorn on 127.0.0.1, with a fake engine call."""

import asyncio
import threading
import time
from collections.abc import AsyncIterator, Callable

import aiohttp
import msgspec
import pytest
import uvicorn

from bench.modelserver import ModelServer
from bench.nginx import free_port
from topics.errors import ErrorCode, VoiceFactoryError
from topics.events import Status, SynthesisRequest, SynthesisResult, decode_result
from topics.events import encode as encode_event


def request(rid: str, text: str = "Bench line 00000001.") -> SynthesisRequest:
    return SynthesisRequest(request_id=rid, voice_id="voice-0001", text=text, language="en")


class FakeEngine:
    """What RequestProcessor.process would do, by text: fail, raise, or answer after 0.2 s."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.running = 0
        self.most = 0

    def __call__(self, r: SynthesisRequest) -> SynthesisResult:
        with self.lock:
            self.running += 1
            self.most = max(self.most, self.running)
        try:
            if r.text == "retryable":
                raise VoiceFactoryError(ErrorCode.STORAGE_ERROR, "S3 down", retryable=True)
            if r.text == "bug":
                raise KeyError("oops")
            time.sleep(0.2)
            status: Status = "failed" if r.text == "unsupported" else "succeeded"
            return SynthesisResult(request_id=r.request_id, voice_id=r.voice_id, status=status,
                                   completed_at="2026-12-02T00:00:00Z", worker="m0")
        finally:
            with self.lock:
                self.running -= 1


async def serve(app: ModelServer) -> AsyncIterator[str]:
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, lifespan="off",
                                           log_level="warning", access_log=False))
    task = asyncio.create_task(server.serve())
    while not server.started:  # noqa: ASYNC110 - uvicorn exposes a flag, not an event
        await asyncio.sleep(0.01)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        await task
        app.close()


@pytest.fixture
def engine() -> FakeEngine:
    return FakeEngine()


@pytest.fixture
async def url(engine: FakeEngine) -> AsyncIterator[str]:
    metrics: Callable[[], tuple[bytes, str]] = lambda: (  # noqa: E731
        b'vf_profile_cache_total{result="hit"} 3.0\n', "text/plain")
    async for u in serve(ModelServer(engine, threads=2, metrics=metrics)):
        yield u


async def test_synthesize_answers_the_result_event(url: str) -> None:
    async with aiohttp.ClientSession() as http, http.post(
            f"{url}/synthesize", data=encode_event(request("r1"))) as r:
        assert r.status == 200
        assert r.headers["content-type"] == "application/json"
        result = decode_result(await r.read())
    assert (result.request_id, result.status, result.worker) == ("r1", "succeeded", "m0")


@pytest.mark.parametrize(("text", "status"), [("unsupported", 422), ("retryable", 503),
                                              ("bug", 500)])
async def test_failures_map_to_statuses_nginx_understands(url: str, text: str,
                                                          status: int) -> None:
    async with aiohttp.ClientSession() as http, http.post(
            f"{url}/synthesize", data=encode_event(request("r2", text))) as r:
        assert r.status == status
        body = msgspec.json.decode(await r.read())
    if status == 503:
        assert body["error"] == "storage_error"


async def test_bad_bodies_and_paths(url: str) -> None:
    async with aiohttp.ClientSession() as http:
        async with http.post(f"{url}/synthesize", data=b"{not json") as r:
            assert r.status == 400
        async with http.post(f"{url}/synthesize", data=b'{"schema": "tts.request.v1"}') as r:
            assert r.status == 400  # missing request_id etc.
        async with http.post(f"{url}/synthesize", data=b"x" * (2 << 20)) as r:
            assert r.status == 400
        async with http.get(f"{url}/nope") as r:
            assert r.status == 404
        async with http.get(f"{url}/healthz") as r:
            assert (r.status, await r.text()) == (200, "ok\n")
        async with http.get(f"{url}/metrics") as r:
            assert 'result="hit"' in await r.text()


async def test_two_syntheses_at_once_and_a_queue_behind(url: str, engine: FakeEngine) -> None:
    started = time.monotonic()
    async with aiohttp.ClientSession() as http:
        async def one(i: int) -> int:
            async with http.post(f"{url}/synthesize",
                                 data=encode_event(request(f"q{i}"))) as r:
                return r.status

        statuses = await asyncio.gather(*(one(i) for i in range(6)))
    assert statuses == [200] * 6
    assert engine.most == 2
    assert time.monotonic() - started >= 0.55  # 6 requests, 2 at a time, 0.2 s each
