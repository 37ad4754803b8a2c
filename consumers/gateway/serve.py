"""One speech answer: chunk records in, HTTP out, and a cancel when the client leaves.

`SpeechAnswer` is the ASGI response the speech route returns once its requests are produced:

    a watcher task waits for the client's `http.disconnect`
    the body task: each part's `ReplyStream` (request order) -> PCM pieces
      whole file (no stream_format): collected -> `encode_whole` -> one response with a length
      audio / sse: a pump feeds the `Encoder`; its pieces go out as they are made, the status
      line and headers only with the first of them, so a request that fails before any
      audio still gets a real HTTP error (4xx/5xx with a reason), not a 200 with nothing.
    the client left first -> the body task is cancelled and `on_cancel` produces a cancel
      for every part not yet finished (tts.control).

A failure after audio went out: `sse` sends an `error` event; `audio` (raw bytes have no
way to say it) ends the connection without the terminating chunk, which every HTTP client
reports as an error rather than a short file.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any

import orjson
from starlette.responses import Response

from consumers.gateway import audio
from consumers.gateway.replies import ReplyStream
from consumers.gateway.speech import SpeechOrder

log = logging.getLogger(__name__)

Send = Callable[[dict[str, Any]], Awaitable[None]]
Receive = Callable[[], Awaitable[dict[str, Any]]]

# A final record's status -> HTTP status (docs/gateway.md); rejected by error code first.
FINAL_STATUS = {"rejected": 400, "failed": 502, "expired": 504, "cancelled": 409}
# request_id_reused: an idempotency key reused with other parameters, the HTTP convention's 409.
REJECTED_CODE = {"voice_not_found": 404, "reference_invalid": 422, "request_id_reused": 409}
# Every part succeeded and not one sample came: a worker's protocol fault, never a real
# answer (text always makes audio), so an error rather than a 200 with an empty file.
NO_AUDIO = (502, "the request succeeded but no audio arrived for it", "no_audio")


class StreamBroken(RuntimeError):
    """The request failed after raw audio went out; raised so the server drops the
    connection and the client sees an incomplete response."""


def error_body(status: int, message: str, code: str, param: str | None = None,
               fields: dict[str, Any] | None = None, **extra: Any) -> bytes:
    """OpenAI's error object, with `fields` inside it (a 403's missing `scope`); `extra`
    goes beside it (a voice upload's `checks`)."""
    kind = "invalid_request_error" if status < 500 else "server_error"
    return orjson.dumps({"error": {"message": message, "type": kind, "param": param,
                                   "code": code, **(fields or {})}, **extra})


def json_error(status: int, message: str, code: str, *, param: str | None = None,
               retry_after: int | None = None, fields: dict[str, Any] | None = None,
               **extra: Any) -> Response:
    headers = {"Retry-After": str(retry_after)} if retry_after is not None else None
    return Response(error_body(status, message, code, param, fields, **extra), status,
                    headers, media_type="application/json")


def status_for(final: str | None, error: str | None) -> int:
    if final == "rejected" and error in REJECTED_CODE:
        return REJECTED_CODE[error]
    return FINAL_STATUS.get(final or "failed", 502)


def failure_of(stream: ReplyStream) -> tuple[int, str, str]:
    """A part that ended without success: (HTTP status, message, error code)."""
    code = stream.error or stream.status or "failed"
    return (status_for(stream.status, stream.error),
            f"request {stream.request_id} {stream.status}: {code}", code)


class SpeechAnswer(Response):
    def __init__(self, order: SpeechOrder, streams: list[ReplyStream], *, received_at: float,
                 on_first_byte: Callable[[float], None],
                 on_cancel: Callable[[list[str], str], Awaitable[None]],
                 on_end: Callable[[], None]) -> None:
        super().__init__()
        self.order = order
        self.streams = streams
        self._received_at = received_at
        self._on_first_byte = on_first_byte
        self._on_cancel = on_cancel
        self._on_end = on_end
        self._started = False
        self.sent_status: int | None = None

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        watcher = asyncio.create_task(_disconnected(receive))
        body = asyncio.create_task(self._respond(send))
        try:
            await asyncio.wait({watcher, body}, return_when=asyncio.FIRST_COMPLETED)
            if not body.done():
                body.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await body
                await self._cancel_unfinished("client disconnected")
                return
            watcher.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await watcher
            error = body.exception()
            if error is not None:
                raise error
        finally:
            for task in (watcher, body):
                if not task.done():
                    task.cancel()
            self._on_end()

    async def _cancel_unfinished(self, reason: str) -> None:
        unfinished = [s.request_id for s in self.streams if s.status is None]
        if unfinished:
            await self._on_cancel(unfinished, reason)

    async def _respond(self, send: Send) -> None:
        fmt = self.order.response_format
        if self.order.stream_format is None:
            await self._whole(send, fmt)
        else:
            await self._streamed(send, fmt, sse=self.order.stream_format == "sse")

    async def _whole(self, send: Send, fmt: str) -> None:
        pcm = bytearray()
        rate = audio.PCM_RATE
        for stream in self.streams:
            try:
                async for piece in stream.pieces():
                    pcm += piece.pcm
                    rate = piece.sample_rate
            except TimeoutError as exc:
                await self._cancel_unfinished("gateway timeout")
                await self._error(send, 504, str(exc), "timeout")
                return
            if stream.status != "succeeded":
                await self._error(send, *failure_of(stream))
                return
        if not pcm:
            await self._error(send, *NO_AUDIO)
            return
        data = await audio.encode_whole(fmt, bytes(pcm), rate)
        await self._start(send, 200, audio.CONTENT_TYPES[fmt], length=len(data))
        await send({"type": "http.response.body", "body": data, "more_body": False})

    async def _streamed(self, send: Send, fmt: str, *, sse: bool) -> None:
        encoder = audio.Encoder(fmt)
        pump = asyncio.create_task(self._pump(encoder))
        content_type = audio.SSE_CONTENT_TYPE if sse else audio.CONTENT_TYPES[fmt]
        sent = 0
        try:
            async for piece in encoder.pieces():
                if not self._started:
                    await self._start(send, 200, content_type)
                sent += len(piece)
                body = audio.sse_delta(piece) if sse else piece
                await send({"type": "http.response.body", "body": body, "more_body": True})
            failed = await pump
        except BaseException:
            pump.cancel()
            await encoder.abort()
            raise
        if failed is None:
            if not self._started:
                await self._start(send, 200, content_type)
            chars = sum(len(r.text) for r in self.order.requests)
            tail = audio.sse_done(chars, sent) if sse else b""
            await send({"type": "http.response.body", "body": tail, "more_body": False})
            return
        status, message, code = failed
        if not self._started:
            await self._error(send, status, message, code)
        elif sse:
            await send({"type": "http.response.body", "body": audio.sse_error(code, message),
                        "more_body": False})
        else:
            raise StreamBroken(f"request failed after audio was sent: {code}: {message}")

    async def _pump(self, encoder: audio.Encoder) -> tuple[int, str, str] | None:
        """Feed every part's PCM to the encoder; the failure (status, message, code) or None."""
        try:
            rate = self.order.requests[0].sample_rate
            if rate is not None:  # ffmpeg starts while the worker synthesizes
                await encoder.prestart(rate)
            fed = 0
            for stream in self.streams:
                async for piece in stream.pieces():
                    await encoder.feed(piece.pcm, piece.sample_rate)
                    fed += len(piece.pcm)
                if stream.status != "succeeded":
                    await encoder.close()
                    return failure_of(stream)
            if not fed:
                await encoder.abort()
                return NO_AUDIO
        except TimeoutError as exc:
            await encoder.abort()
            await self._cancel_unfinished("gateway timeout")
            return 504, str(exc), "timeout"
        except audio.EncoderError as exc:
            await encoder.abort()
            return 500, str(exc), "encoder_error"
        await encoder.close()
        return None

    async def _error(self, send: Send, status: int, message: str, code: str) -> None:
        body = error_body(status, message, code)
        await self._start(send, status, "application/json", length=len(body), first_byte=False)
        await send({"type": "http.response.body", "body": body, "more_body": False})

    async def _start(self, send: Send, status: int, content_type: str, *,
                     length: int | None = None, first_byte: bool = True) -> None:
        headers = [(b"content-type", content_type.encode()), (b"cache-control", b"no-store"),
                   (b"x-request-id", self.order.requests[0].request_id.encode())]
        if length is not None:
            headers.append((b"content-length", str(length).encode()))
        await send({"type": "http.response.start", "status": status, "headers": headers})
        self._started = True
        self.sent_status = status
        if first_byte and status == 200:
            self._on_first_byte(time.monotonic() - self._received_at)


async def _disconnected(receive: Receive) -> None:
    while (await receive())["type"] != "http.disconnect":
        pass
