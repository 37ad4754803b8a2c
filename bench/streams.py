"""The benchmarks' reader of `tts.audio`: when each streamed request's first audio arrived.

AudioLog assigns itself every partition of one prefix's audio topic (no group: it reads
what the workers wrote, from the beginning) -> each record through
`topics.chunks.read_chunk` -> per request_id (the record key): the wall time of the first
record that carries audio, chunks and PCM bytes seen, the attempts, and the final record's
status. Producer and reader are in the driver's process, so "first chunk - produce" is one
clock. A record without chunk headers is counted, not fatal: the figure is about the
records that are chunks.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass, field

from aiokafka import ConsumerRecord

from bench.readers import TopicReader
from consumers.settings import Settings
from topics.chunks import InvalidChunk, read_chunk
from topics.specs import AUDIO

log = logging.getLogger(__name__)


@dataclass
class StreamSeen:
    """What arrived on tts.audio for one request."""

    first_audio: float | None = None  # wall time of the first record with PCM bytes
    chunks: int = 0
    pcm_bytes: int = 0
    sample_rate: int = 0
    attempts: set[str] = field(default_factory=set)
    final_at: float | None = None
    status: str | None = None  # the final record's vf-status

    @property
    def audio_seconds(self) -> float:
        """Seconds of s16le mono audio received (all attempts together)."""
        return self.pcm_bytes / 2 / self.sample_rate if self.sample_rate else 0.0


class AudioLog(TopicReader):
    """Every chunk record on the audio topic of one prefix, with the wall time it arrived."""

    topic_of = staticmethod(lambda names: names.audio)
    partitions = AUDIO.partitions

    def __init__(self, settings: Settings) -> None:
        super().__init__(settings)
        self.streams: dict[str, StreamSeen] = {}
        self.invalid = 0  # records on the topic that are not chunks

    def take(self, rec: ConsumerRecord[bytes, bytes], now: float) -> None:
        self.note(rec.key, rec.value, list(rec.headers or ()), now)

    def note(self, key: bytes | None, value: bytes | None,
             headers: list[tuple[str, bytes]], now: float) -> None:
        """One record read at wall time `now` (separate from the reader for tests)."""
        try:
            chunk = read_chunk(key, value, headers)
        except InvalidChunk:
            self.invalid += 1
            return
        seen = self.streams.setdefault(chunk.request_id, StreamSeen())
        seen.chunks += 1
        seen.attempts.add(chunk.attempt)
        if chunk.data:
            seen.pcm_bytes += len(chunk.data)
            seen.sample_rate = chunk.sample_rate
            if seen.first_audio is None:
                seen.first_audio = now
        if chunk.final:
            seen.final_at = now
            seen.status = chunk.status

    def first_audio(self) -> dict[str, float]:
        """request_id -> wall time its first audio chunk was read."""
        return {rid: s.first_audio for rid, s in self.streams.items()
                if s.first_audio is not None}

    async def wait_first(self, wanted: set[str], timeout_s: float) -> set[str]:
        """Wait until every wanted request has had audio; returns those still without."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            missing = wanted - self.first_audio().keys()
            if not missing:
                return set()
            await asyncio.sleep(0.1)
        return wanted - self.first_audio().keys()
