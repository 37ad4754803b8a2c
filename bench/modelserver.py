"""The peer benchmark's HTTP model server: the seed's design, one process per server.

`python -m bench.modelserver --port P` (settings from VF_* variables, as the worker reads
them) -> consumers.wiring.build_worker(settings): the same engine, profile resolver (LRU of
VF_PROFILE_CACHE_ENTRIES), RequestProcessor and metrics `voicefactory worker` runs (its Kafka
loop is built, never started) -> uvicorn serves ModelServer on 127.0.0.1:P.

ModelServer (ASGI, no framework):
    POST /synthesize  body: a `tts.request.v1` JSON event -> a thread of a pool of
                      2 x max_inflight (the worker's dispatcher count) runs
                      RequestProcessor.process; the processor admits max_inflight at once
                      to the engine, the rest wait: the queue behind ->
                      200 + the `tts.result.v1` event (succeeded), 422 (answered, failed),
                      503 (a retryable error: nginx tries the next server), 400 (bad body)
    GET /healthz      200 once the engine is loaded (the process only listens after that)
    GET /metrics      the worker's Prometheus text (vf_profile_cache_total{result} etc.)
"""

from __future__ import annotations

import argparse
import asyncio
import logging
from collections.abc import Awaitable, Callable, MutableMapping
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import msgspec

from topics.errors import VoiceFactoryError
from topics.events import SynthesisRequest, SynthesisResult
from topics.events import encode as encode_event

if TYPE_CHECKING:
    from consumers.settings import Settings

log = logging.getLogger(__name__)

Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]
Handler = Callable[[SynthesisRequest], SynthesisResult]
MAX_BODY = 1 << 20  # a request event is a few hundred bytes


class ModelServer:
    """ASGI app: requests decoded, handed to `handle` in a thread pool, answered as JSON."""

    def __init__(self, handle: Handler, *, threads: int,
                 metrics: Callable[[], tuple[bytes, str]] | None = None) -> None:
        self._handle = handle
        self._pool = ThreadPoolExecutor(threads, thread_name_prefix="synth")
        self._metrics = metrics
        self.served = 0

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await _lifespan(receive, send)
            return
        if scope["type"] != "http":
            return
        method, path = scope["method"], scope["path"]
        if path == "/healthz" and method == "GET":
            await _respond(send, 200, b"ok\n", "text/plain")
        elif path == "/metrics" and method == "GET" and self._metrics is not None:
            body, content_type = self._metrics()
            await _respond(send, 200, body, content_type)
        elif path == "/synthesize" and method == "POST":
            status, body = await self._synthesize(await _body(receive))
            await _respond(send, status, body, "application/json")
        else:
            await _respond(send, 404, b'{"error":"not found"}', "application/json")

    async def _synthesize(self, raw: bytes | None) -> tuple[int, bytes]:
        if raw is None:
            return 400, b'{"error":"body too large"}'
        try:
            request = msgspec.json.decode(raw, type=SynthesisRequest)
        except msgspec.DecodeError as exc:  # ValidationError is a DecodeError
            return 400, msgspec.json.encode({"error": str(exc)})
        loop = asyncio.get_running_loop()
        try:
            result = await loop.run_in_executor(self._pool, self._handle, request)
        except VoiceFactoryError as exc:
            status = 503 if exc.retryable else 500
            return status, msgspec.json.encode({"error": exc.code.value, "message": str(exc)})
        except Exception as exc:  # a bug, not a verdict on the request: say it, keep serving
            log.exception("synthesis of %s failed", request.request_id)
            return 500, msgspec.json.encode({"error": type(exc).__name__})
        self.served += 1
        return (200 if result.status == "succeeded" else 422), encode_event(result)

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)


async def _body(receive: Receive) -> bytes | None:
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            break
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > MAX_BODY:
            return None
        chunks.append(chunk)
        if not message.get("more_body", False):
            break
    return b"".join(chunks)


async def _respond(send: Send, status: int, body: bytes, content_type: str) -> None:
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", content_type.encode()),
                            (b"content-length", str(len(body)).encode())]})
    await send({"type": "http.response.body", "body": body})


async def _lifespan(receive: Receive, send: Send) -> None:
    while True:
        message = await receive()
        if message["type"] == "lifespan.startup":
            await send({"type": "lifespan.startup.complete"})
        elif message["type"] == "lifespan.shutdown":
            await send({"type": "lifespan.shutdown.complete"})
            return


def build(settings: Settings) -> ModelServer:
    """The worker's objects behind a ModelServer (what `main` serves)."""
    from consumers.wiring import build_worker
    from pipeline.synthesis import Received

    runtime = build_worker(settings)
    processor = runtime.processor

    def handle(request: SynthesisRequest) -> SynthesisResult:
        return processor.process(request, Received(timestamp=datetime.now(UTC)))

    return ModelServer(handle, threads=2 * settings.worker.max_inflight,
                       metrics=runtime.metrics.render)


def main(argv: list[str] | None = None) -> None:
    import uvicorn

    from consumers.settings import Settings

    parser = argparse.ArgumentParser(prog="python -m bench.modelserver")
    parser.add_argument("--port", type=int, required=True)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s %(message)s")
    app = build(Settings.from_env())
    log.info("model server ready on 127.0.0.1:%d", args.port)
    # Keep-alive longer than nginx's upstream idle time, so nginx never reuses a connection
    # the server is closing at that moment.
    uvicorn.run(app, host="127.0.0.1", port=args.port, log_level="warning", access_log=False,
                lifespan="off", timeout_keep_alive=75)


if __name__ == "__main__":
    main()
