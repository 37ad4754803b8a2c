"""Response formats decode with ffprobe (whole and streamed), and the SSE framing."""

from __future__ import annotations

import asyncio
import base64
import json
import math
import struct
import subprocess

import pytest

from consumers.gateway import audio

RATE = 22050
CODECS = {"mp3": "mp3", "opus": "opus", "aac": "aac", "flac": "flac", "wav": "pcm_s16le",
          "pcm": "pcm_s16le"}


def tone(seconds: float, rate: int = RATE) -> bytes:
    n = int(seconds * rate)
    return struct.pack(f"<{n}h", *(int(9000 * math.sin(2 * math.pi * 330 * i / rate))
                                   for i in range(n)))


def probe(fmt: str, data: bytes) -> tuple[str, float]:
    """ffprobe's codec name, and the decoded duration (ffmpeg decodes every packet)."""
    raw = ["-f", "s16le", "-ar", str(audio.PCM_RATE), "-ac", "1"] if fmt == "pcm" else []
    shown = subprocess.run(["ffprobe", "-v", "error", *raw, "-show_entries",
                            "stream=codec_name", "-of", "json", "pipe:0"], input=data,
                           capture_output=True, check=True)
    codec = json.loads(shown.stdout)["streams"][0]["codec_name"]
    decoded = subprocess.run(["ffmpeg", "-v", "error", *raw, "-i", "pipe:0", "-f", "s16le",
                              "-ac", "1", "-ar", "8000", "pipe:1"], input=data,
                             capture_output=True, check=True)
    return codec, len(decoded.stdout) / 2 / 8000


@pytest.mark.parametrize("fmt", audio.CONTENT_TYPES)
async def test_whole_files_decode(fmt: str) -> None:
    data = await audio.encode_whole(fmt, tone(1.0), RATE)
    codec, seconds = probe(fmt, data)
    assert codec == CODECS[fmt]
    assert abs(seconds - 1.0) < 0.08, seconds  # encoders pad a frame at most


@pytest.mark.parametrize("fmt", audio.CONTENT_TYPES)
async def test_streamed_output_decodes_and_arrives_before_the_input_ends(fmt: str) -> None:
    encoder = audio.Encoder(fmt)
    pieces: list[bytes] = []
    first = asyncio.Event()

    async def collect() -> None:
        async for piece in encoder.pieces():
            pieces.append(piece)
            first.set()

    reader = asyncio.create_task(collect())
    for _ in range(4):
        await encoder.feed(tone(0.5), RATE)
    await asyncio.wait_for(first.wait(), 5)  # output flows while the input is still open
    await encoder.close()
    await reader
    codec, seconds = probe(fmt, b"".join(pieces))
    assert codec == CODECS[fmt]
    assert abs(seconds - 2.0) < 0.1, seconds


async def test_pcm_at_24k_passes_through_untouched() -> None:
    encoder = audio.Encoder("pcm")
    pcm = tone(0.2, audio.PCM_RATE)
    await encoder.feed(pcm, audio.PCM_RATE)
    await encoder.close()
    assert [p async for p in encoder.pieces()] == [pcm]


async def test_an_aborted_encoder_ends_its_pieces() -> None:
    encoder = audio.Encoder("mp3")
    await encoder.feed(tone(0.2), RATE)
    await encoder.abort()
    await asyncio.wait_for(asyncio.gather(_drain(encoder)), 5)


async def _drain(encoder: audio.Encoder) -> None:
    async for _ in encoder.pieces():
        pass


def test_sse_events_are_openai_shaped() -> None:
    delta = audio.sse_delta(b"\x00\x01abc")
    assert delta.startswith(b"data: ") and delta.endswith(b"\n\n")
    event = json.loads(delta[6:])
    assert event["type"] == "speech.audio.delta"
    assert base64.b64decode(event["audio"]) == b"\x00\x01abc"
    done = json.loads(audio.sse_done(12, 3000)[6:])
    assert done == {"type": "speech.audio.done",
                    "usage": {"input_tokens": 12, "output_tokens": 3000, "total_tokens": 3012}}
    error = json.loads(audio.sse_error("engine_error", "boom")[6:])
    assert error == {"type": "error", "error": {"code": "engine_error", "message": "boom"}}


@pytest.mark.parametrize("chunk_rate", [audio.PCM_RATE, RATE])
async def test_a_prestarted_encoder_is_replaced_when_chunks_come_at_another_rate(
        chunk_rate: int) -> None:
    encoder = audio.Encoder("mp3")
    await encoder.prestart(audio.PCM_RATE)
    for _ in range(2):
        await encoder.feed(tone(0.5, chunk_rate), chunk_rate)
    await encoder.close()
    codec, seconds = probe("mp3", b"".join([p async for p in encoder.pieces()]))
    assert codec == "mp3" and abs(seconds - 1.0) < 0.08, seconds


async def test_the_rate_may_not_change_mid_stream() -> None:
    encoder = audio.Encoder("flac")
    await encoder.feed(tone(0.1), RATE)
    with pytest.raises(audio.EncoderError, match="22050 -> 24000"):
        await encoder.feed(tone(0.1, audio.PCM_RATE), audio.PCM_RATE)
    await encoder.abort()
