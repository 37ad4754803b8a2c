"""The `bench` engine: speech-like synthetic audio at a configurable cost, for load tests.

synthesize(profile, batch) -> fault markers checked -> per item: length from the text
(len(text) * seconds_per_char, at least 0.3 s, divided by speed) -> harmonics of the
profile's pitch under a syllable-rate envelope plus a little noise, 24 kHz float32, peak 0.3,
deterministic per (voice, text) -> time.sleep until the call has cost

    base_ms + per_item_ms * n + per_audio_second_ms * (seconds of audio in the batch)

so a batch behaves like one GPU call: it runs in the worker's thread and blocks it, and the
time spent making the audio counts towards the cost. synthesize_voices(batch of (profile,
item)) is the same call over several voices' items (the worker mixes voices in a batch when
an engine has it), at the same cost. Markers in a text inject faults:
`[[bench:fail]]` raises a retryable engine error, `[[bench:oom]]` an out-of-memory on any
batch holding it, `[[bench:oom-batch]]` an out-of-memory only on batches of two or more (so
the split-and-retry path succeeds). It clones nothing; never the default engine.

synthesize_stream(profile, item): the same clip as synthesize makes for the item, handed
out in windows of `chunk_seconds` (the last one shorter), paced like a streaming GPU model:
the first window `first_chunk_ms` after the call started, each later one
`per_audio_second_ms * its seconds` after the one before (deadlines from the start, so
sleep jitter does not add up). VF_BENCH_PER_AUDIO_SECOND_MS=100 is a real-time factor of
0.1. base_ms and per_item_ms do not apply to streams.
"""

from __future__ import annotations

import functools
import hashlib
import math
import os
import threading
import time
from collections.abc import Mapping

import numpy as np
import numpy.typing as npt

from pipeline.audio import Audio, Samples
from pipeline.engines.base import (
    AudioStream,
    Capabilities,
    EngineOutOfMemory,
    Profile,
    SynthesisItem,
    Synthesized,
    VoiceMeasures,
)
from pipeline.text import guess_language
from topics.errors import ErrorCode, VoiceFactoryError

SAMPLE_RATE = 24000
MIN_SECONDS = 0.3
FAIL_MARKER = "[[bench:fail]]"
OOM_MARKER = "[[bench:oom]]"
OOM_BATCH_MARKER = "[[bench:oom-batch]]"
_HARMONICS = 6
_PEAK = 0.3

Floats = npt.NDArray[np.float64]


class BenchEngine:
    name = "bench"

    def __init__(self, *, base_ms: float = 0.0, per_item_ms: float = 0.0,
                 per_audio_second_ms: float = 0.0, seconds_per_char: float = 0.06,
                 first_chunk_ms: float = 0.0, chunk_seconds: float = 0.5,
                 fail_texts: bool = True) -> None:
        for knob, value in (("base_ms", base_ms), ("per_item_ms", per_item_ms),
                            ("per_audio_second_ms", per_audio_second_ms),
                            ("first_chunk_ms", first_chunk_ms)):
            if not math.isfinite(value) or value < 0:
                raise ValueError(f"{knob} must be a finite number >= 0, got {value!r}")
        if not math.isfinite(seconds_per_char) or seconds_per_char <= 0:
            raise ValueError(f"seconds_per_char must be a finite number > 0, "
                             f"got {seconds_per_char!r}")
        if not math.isfinite(chunk_seconds) or chunk_seconds <= 0:
            raise ValueError(f"chunk_seconds must be a finite number > 0, got {chunk_seconds!r}")
        self.base_ms = base_ms
        self.per_item_ms = per_item_ms
        self.per_audio_second_ms = per_audio_second_ms
        self.seconds_per_char = seconds_per_char
        self.first_chunk_ms = first_chunk_ms  # streams: time to the first chunk
        self.chunk_seconds = chunk_seconds  # streams: audio per chunk
        self.fail_texts = fail_texts  # honour the [[bench:...]] fault markers
        # Counters for tests and load reports; synthesize runs in several threads at once.
        self._lock = threading.Lock()
        self._running = 0
        self.calls = 0
        self.items = 0
        self.max_concurrent_seen = 0

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> BenchEngine:
        """Knobs from VF_BENCH_BASE_MS, VF_BENCH_PER_ITEM_MS, VF_BENCH_PER_AUDIO_SECOND_MS,
        VF_BENCH_SECONDS_PER_CHAR and, for streams, VF_BENCH_FIRST_CHUNK_MS and
        VF_BENCH_CHUNK_SECONDS; unset or empty means the default."""
        env = os.environ if environ is None else environ

        def number(name: str, default: float) -> float:
            raw = env.get(name, "").strip()
            if not raw:
                return default
            try:
                return float(raw)
            except ValueError:
                raise ValueError(f"{name} must be a number, got {raw!r}") from None

        return cls(base_ms=number("VF_BENCH_BASE_MS", 0.0),
                   per_item_ms=number("VF_BENCH_PER_ITEM_MS", 0.0),
                   per_audio_second_ms=number("VF_BENCH_PER_AUDIO_SECOND_MS", 0.0),
                   seconds_per_char=number("VF_BENCH_SECONDS_PER_CHAR", 0.06),
                   first_chunk_ms=number("VF_BENCH_FIRST_CHUNK_MS", 0.0),
                   chunk_seconds=number("VF_BENCH_CHUNK_SECONDS", 0.5))

    @property
    def capabilities(self) -> Capabilities:
        return Capabilities(languages=("*",),
                            modes=("zero_shot", "cross_lingual", "instruct", "sft"),
                            batching=True, streaming=True,
                            cloning="none: synthetic audio at a pitch derived from the voice",
                            speech=False)

    def load(self) -> None:
        """Nothing to load: the bench engine needs no weights and no device."""

    def profile(self, *, voice_id: str, sha256: str, reference: Audio,
                prompt_text: str | None, measures: VoiceMeasures) -> Profile:
        # A pitch from the reference's hash, not its analysis: cheap and stable per voice.
        seed = _seed(voice_id, sha256)
        return Profile(voice_id=voice_id, sha256=sha256, engine=self.name,
                       features={"pitch_hz": 90.0 + seed % 160})

    def cost_s(self, n_items: int, audio_seconds: float) -> float:
        """What a call on `n_items` making `audio_seconds` of audio costs, in seconds."""
        return (self.base_ms + self.per_item_ms * n_items
                + self.per_audio_second_ms * audio_seconds) / 1000

    def seconds_for(self, item: SynthesisItem) -> float:
        """Length of the audio made for `item`."""
        return max(MIN_SECONDS, len(item.text) * self.seconds_per_char) / item.speed

    def synthesize(self, profile: Profile, batch: list[SynthesisItem]) -> list[Synthesized]:
        return self.synthesize_voices([(profile, item) for item in batch])

    def synthesize_voices(self, batch: list[tuple[Profile, SynthesisItem]]) -> list[Synthesized]:
        """One call over items of any voices, each with its own profile: the cost model does
        not care whose voice an item is, as a GPU batch of prompts does not."""
        started = time.perf_counter()
        with self._lock:
            self._running += 1
            self.calls += 1
            self.items += len(batch)
            self.max_concurrent_seen = max(self.max_concurrent_seen, self._running)
        try:
            items = [item for _, item in batch]
            if self.fail_texts:
                self._inject_faults(items)
            out = [Synthesized(audio=self._audio(profile, item),
                               language=(item.language or guess_language(item.text)).lower())
                   for profile, item in batch]
            seconds = sum(s.audio.duration_s for s in out)
            left = self.cost_s(len(batch), seconds) - (time.perf_counter() - started)
            if left > 0:
                time.sleep(left)
            return out
        finally:
            with self._lock:
                self._running -= 1

    def stream_schedule(self, seconds: list[float]) -> list[float]:
        """When each chunk of `seconds` of audio is due, in seconds after the call started."""
        due: list[float] = []
        at = self.first_chunk_ms / 1000
        for index, length in enumerate(seconds):
            if index:
                at += self.per_audio_second_ms * length / 1000
            due.append(at)
        return due

    def synthesize_stream(self, profile: Profile, item: SynthesisItem) -> AudioStream:
        started = time.perf_counter()
        with self._lock:
            self._running += 1
            self.calls += 1
            self.items += 1
            self.max_concurrent_seen = max(self.max_concurrent_seen, self._running)
        try:
            if self.fail_texts:
                self._inject_faults([item])
            samples = self._audio(profile, item).samples
            window = max(1, round(self.chunk_seconds * SAMPLE_RATE))
            pieces = [samples[i:i + window] for i in range(0, len(samples), window)]
            due = self.stream_schedule([len(p) / SAMPLE_RATE for p in pieces])
            for piece, at in zip(pieces, due, strict=True):
                left = at - (time.perf_counter() - started)
                if left > 0:
                    time.sleep(left)
                yield Audio(samples=piece, sample_rate=SAMPLE_RATE)
        finally:
            with self._lock:
                self._running -= 1

    @staticmethod
    def _inject_faults(batch: list[SynthesisItem]) -> None:
        texts = [item.text for item in batch]
        if any(FAIL_MARKER in text for text in texts):
            raise VoiceFactoryError(ErrorCode.ENGINE_ERROR, "bench: injected engine failure",
                                    retryable=True)
        if any(OOM_MARKER in text for text in texts):
            raise EngineOutOfMemory(f"bench: injected out of memory on a batch of {len(batch)}")
        if len(batch) > 1 and any(OOM_BATCH_MARKER in text for text in texts):
            raise EngineOutOfMemory(f"bench: injected out of memory on a batch of {len(batch)}")

    def _audio(self, profile: Profile, item: SynthesisItem) -> Audio:
        n = max(1, round(self.seconds_for(item) * SAMPLE_RATE))
        f0 = profile.features.get("pitch_hz", 140.0)
        base = _speech_like(n, f0, _seed(profile.voice_id, profile.sha256))
        # Each text a different rotation of the voice's clip: deterministic, distinct, and
        # one array copy, so a "zero-cost" engine costs next to nothing (capacity bench).
        shift = _seed(item.text) % n
        samples: Samples = np.roll(base, shift)
        return Audio(samples=samples, sample_rate=SAMPLE_RATE)


@functools.lru_cache(maxsize=64)  # ~100 KB a clip: bounded, or the memory bench sees it
def _speech_like(n: int, f0: float, seed: int) -> Samples:
    """`n` samples of a voice at `f0`: harmonics under a syllable envelope, plus a little noise."""
    rng = np.random.default_rng(seed)
    t = np.arange(n, dtype=np.float64) / SAMPLE_RATE
    # Intonation: a slow wobble around the voice's pitch, falling a little to the end.
    contour = f0 * (1 + 0.06 * np.sin(2 * np.pi * 0.7 * t + rng.uniform(0, 2 * np.pi)))
    contour *= 1 - 0.1 * t / max(float(t[-1]), 1e-9)
    cycles = np.cumsum(contour) / SAMPLE_RATE
    # One band-limited period, looked up by phase: the harmonic sum costs one table
    # read a sample instead of _HARMONICS sines (the engine's own cost must stay small
    # next to the pipeline it is there to load-test).
    table = _voiced_period()
    voiced = table[(cycles * table.size).astype(np.int64) % table.size]
    signal = voiced * _syllables(t, rng) + 0.01 * rng.standard_normal(n)
    peak = float(np.max(np.abs(signal))) or 1.0
    samples: Samples = (_PEAK * signal / peak).astype(np.float32)
    samples.setflags(write=False)  # shared by the cache: np.roll copies, nobody writes
    return samples


@functools.cache
def _voiced_period(size: int = 2048) -> Floats:
    phase = 2 * np.pi * np.arange(size) / size
    period: Floats = sum(np.sin(k * phase) / k for k in range(1, _HARMONICS + 1))  # type: ignore[assignment]
    return period


def _syllables(t: Floats, rng: np.random.Generator) -> Floats:
    """An amplitude envelope of raised-cosine syllables, 0.15-0.3 s each (~4-6 a second)."""
    total = float(t[-1]) + 1 / SAMPLE_RATE
    count = int(total / 0.15) + 2
    starts = np.concatenate(([0.0], np.cumsum(rng.uniform(0.15, 0.3, count))))
    loudness = rng.uniform(0.4, 1.0, count + 1)
    index = np.searchsorted(starts, t, side="right") - 1
    length = starts[index + 1] - starts[index]
    within = (t - starts[index]) / length
    envelope: Floats = loudness[index] * np.sin(np.pi * within) ** 2
    return envelope


def _seed(*parts: str) -> int:
    return int.from_bytes(hashlib.sha256("\0".join(parts).encode()).digest()[:8], "big")
