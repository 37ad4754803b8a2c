"""PCM chunks -> the response format OpenAI's clients asked for, and SSE framing.

Streaming: one `ffmpeg` process per answer (s16le mono on stdin, the format on stdout,
packets flushed as they are made), started for the requested rate before the first chunk
arrives; `Encoder.feed(pcm)` writes to it, `pieces()` yields what it makes, `close()` ends
its input. `pcm` needs no encoder at 24 kHz (OpenAI's pcm rate), else ffmpeg resamples it.
Whole files (no stream_format): `encode_whole` runs ffmpeg once over all the samples, and
builds `wav` itself so its header carries the real sizes (a piped WAV from ffmpeg cannot).

SSE (`stream_format: sse`): each encoded piece -> `speech.audio.delta` with base64 audio,
then one `speech.audio.done`, or an `error` event when the request failed mid-stream.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import shutil
from collections.abc import AsyncIterator, Sequence

import orjson

from pipeline.encode import wav_header

PCM_RATE = 24_000  # OpenAI's `pcm`: 24 kHz, 16-bit signed little-endian, mono
CONTENT_TYPES = {"mp3": "audio/mpeg", "opus": "audio/ogg", "aac": "audio/aac",
                 "flac": "audio/flac", "wav": "audio/wav", "pcm": "audio/pcm"}
SSE_CONTENT_TYPE = "text/event-stream"
# Output options per format; opus runs at 48 kHz only among the rates engines produce.
_OUTPUT: dict[str, Sequence[str]] = {
    "mp3": ("-c:a", "libmp3lame", "-b:a", "64k", "-f", "mp3"),
    "opus": ("-ar", "48000", "-c:a", "libopus", "-b:a", "32k", "-page_duration", "20000",
             "-f", "ogg"),
    "aac": ("-c:a", "aac", "-b:a", "64k", "-f", "adts"),
    "flac": ("-c:a", "flac", "-f", "flac"),
    "wav": ("-c:a", "pcm_s16le", "-f", "wav"),
    "pcm": ("-ar", str(PCM_RATE), "-c:a", "pcm_s16le", "-f", "s16le"),
}
_READ = 65536


class EncoderError(RuntimeError):
    """ffmpeg is missing or failed; the message carries its stderr's first line."""


def _ffmpeg() -> str:
    found = shutil.which("ffmpeg")
    if found is None:
        raise EncoderError("ffmpeg is not installed (`apt-get install ffmpeg`)")
    return found


def _command(fmt: str, sample_rate: int, *, streaming: bool) -> list[str]:
    # No probing: the input's format is given, and ffmpeg's default probe buffers about half
    # a second of audio before it encodes anything (measured: 450 ms to the first frame).
    cmd = [_ffmpeg(), "-nostdin", "-hide_banner", "-loglevel", "error",
           "-probesize", "32", "-analyzeduration", "0",
           "-f", "s16le", "-ar", str(sample_rate), "-ac", "1", "-i", "pipe:0", *_OUTPUT[fmt]]
    if streaming:  # write each packet as it is made
        cmd += ["-flush_packets", "1"]
    return [*cmd, "pipe:1"]


async def encode_whole(fmt: str, pcm: bytes, sample_rate: int) -> bytes:
    if fmt == "wav":
        return wav_header(len(pcm), sample_rate) + pcm
    if fmt == "pcm" and sample_rate == PCM_RATE:
        return pcm
    proc = await asyncio.create_subprocess_exec(
        *_command(fmt, sample_rate, streaming=False), stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    out, err = await proc.communicate(pcm)
    if proc.returncode != 0:
        raise EncoderError(f"ffmpeg {fmt} failed: {err.decode(errors='replace')[:200]}")
    return out


class Encoder:
    """One streamed response's encoder: a pump task feeds PCM in, the response iterates
    `pieces()`, which yields encoded bytes as ffmpeg makes them (independently of the
    input's pace) and ends after `close()`.

    `prestart(rate)` launches ffmpeg for the rate the request asked for while the worker is
    still synthesizing, so the process start (tens of ms) is not on the first byte's path;
    a first chunk at another rate replaces it (nothing has been emitted yet).
    """

    def __init__(self, fmt: str) -> None:
        self.fmt = fmt
        self._proc: asyncio.subprocess.Process | None = None
        self._rate: int | None = None
        self._queue: asyncio.Queue[bytes | None] = asyncio.Queue()
        self._reader: asyncio.Task[None] | None = None
        self._passthrough = False
        self._fed = False
        self._closed = False

    async def prestart(self, sample_rate: int) -> None:
        if self.fmt == "pcm" and sample_rate == PCM_RATE:
            return  # nothing to start: passthrough
        await self._start(sample_rate)

    async def feed(self, pcm: bytes, sample_rate: int) -> None:
        if not self._fed:
            self._fed = True
            if self._proc is not None and self._rate != sample_rate:
                await self._replace()
            if self._proc is None:
                if self.fmt == "pcm" and sample_rate == PCM_RATE:
                    self._passthrough = True
                else:
                    await self._start(sample_rate)
        elif self._rate is not None and sample_rate != self._rate and not self._passthrough:
            raise EncoderError(f"sample rate changed mid-stream: {self._rate} -> {sample_rate}")
        if self._passthrough:
            self._queue.put_nowait(pcm)
            return
        assert self._proc is not None and self._proc.stdin is not None
        try:
            self._proc.stdin.write(pcm)
            await self._proc.stdin.drain()
        except (BrokenPipeError, ConnectionResetError):
            raise EncoderError(f"ffmpeg {self.fmt} stopped taking input") from None

    async def _replace(self) -> None:
        """Drop a prestarted ffmpeg that runs at the wrong rate (it has seen no input)."""
        proc, reader = self._proc, self._reader
        self._proc = self._reader = None
        if reader is not None:
            reader.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await reader
        if proc is not None:
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
            await proc.wait()

    async def close(self) -> None:
        """No more input: the pieces end once ffmpeg has written the rest."""
        if self._closed:
            return
        self._closed = True
        proc = self._proc
        if proc is None:
            self._queue.put_nowait(None)
            return
        assert proc.stdin is not None
        proc.stdin.close()
        if self._reader is not None:
            await self._reader
        assert proc.stderr is not None
        err = await proc.stderr.read()  # -loglevel error: a line or two at most
        code = await proc.wait()
        if code != 0:
            raise EncoderError(f"ffmpeg {self.fmt} exited with {code}: "
                               f"{err.decode(errors='replace').strip()[:200]}")

    async def pieces(self) -> AsyncIterator[bytes]:
        while (piece := await self._queue.get()) is not None:
            yield piece

    async def abort(self) -> None:
        """The response ended early: stop ffmpeg without waiting for its output."""
        self._closed = True
        proc, self._proc = self._proc, None
        if proc is not None and proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
            await proc.wait()
        if self._reader is not None:
            self._reader.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._reader
        self._queue.put_nowait(None)

    async def _start(self, sample_rate: int) -> None:
        self._rate = sample_rate
        self._proc = await asyncio.create_subprocess_exec(
            *_command(self.fmt, sample_rate, streaming=True), stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
        self._reader = asyncio.create_task(self._read(self._proc))

    async def _read(self, proc: asyncio.subprocess.Process) -> None:
        assert proc.stdout is not None
        while data := await proc.stdout.read(_READ):
            self._queue.put_nowait(data)
        self._queue.put_nowait(None)  # EOF only: a replaced reader is cancelled, not ended


def sse_delta(audio: bytes) -> bytes:
    return _event({"type": "speech.audio.delta", "audio": base64.b64encode(audio).decode()})


def sse_done(input_chars: int, audio_bytes: int) -> bytes:
    # OpenAI reports token usage; characters in and audio bytes out are what we can count.
    return _event({"type": "speech.audio.done",
                   "usage": {"input_tokens": input_chars, "output_tokens": audio_bytes,
                             "total_tokens": input_chars + audio_bytes}})


def sse_error(code: str, message: str) -> bytes:
    return _event({"type": "error", "error": {"code": code, "message": message}})


def _event(payload: dict[str, object]) -> bytes:
    return b"data: " + orjson.dumps(payload) + b"\n\n"
