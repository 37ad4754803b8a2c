"""The `bench` engine: synthetic speech-like audio at a configurable cost, for load tests.

cost of one call = base_ms + per_item_ms * n + per_audio_second_ms * (audio seconds made),
spent in time.sleep (the worker runs engines in a thread, as it would a GPU call). Output:
harmonics of a pitch taken from the profile, shaped by a syllable-rate envelope, 24 kHz,
deterministic per (voice, text). Markers in the text inject faults: `[[bench:fail]]` raises
a retryable engine error, `[[bench:oom]]` an out-of-memory on any batch larger than one.
Never the default engine.
"""

from __future__ import annotations

import hashlib
import os
import threading
import time
from collections.abc import Mapping

import numpy as np

from pipeline.audio import Audio
from pipeline.engines.base import (
    Capabilities,
    EngineOutOfMemory,
    Profile,
    SynthesisItem,
    Synthesized,
)
from topics.errors import ErrorCode, VoiceFactoryError

RATE = 24000


class BenchEngine:
    name = "bench"

    def __init__(self, *, base_ms: float = 0.0, per_item_ms: float = 0.0,
                 per_audio_second_ms: float = 0.0, seconds_per_char: float = 0.06) -> None:
        self.base_ms = base_ms
        self.per_item_ms = per_item_ms
        self.per_audio_second_ms = per_audio_second_ms
        self.seconds_per_char = seconds_per_char
        self._lock = threading.Lock()
        self._running = 0
        self.max_concurrent_seen = 0
        self.calls = 0
        self.items = 0

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> BenchEngine:
        env = os.environ if environ is None else environ

        def number(name: str, default: float) -> float:
            raw = env.get(name)
            try:
                return default if raw is None else float(raw)
            except ValueError:
                raise ValueError(f"{name} must be a number, got {raw!r}") from None

        return cls(base_ms=number("VF_BENCH_BASE_MS", 0.0),
                   per_item_ms=number("VF_BENCH_PER_ITEM_MS", 0.0),
                   per_audio_second_ms=number("VF_BENCH_PER_AUDIO_SECOND_MS", 0.0),
                   seconds_per_char=number("VF_BENCH_SECONDS_PER_CHAR", 0.06))

    @property
    def capabilities(self) -> Capabilities:
        return Capabilities(languages=("*",), modes=("zero_shot", "cross_lingual", "instruct",
                                                     "sft"),
                            batching=True, streaming=False, cloning="none (synthetic audio)")

    def load(self) -> None:
        pass

    def profile(self, *, voice_id: str, sha256: str, reference: Audio,
                prompt_text: str | None) -> Profile:
        seed = int(hashlib.sha256(f"{voice_id}:{sha256}".encode()).hexdigest()[:8], 16)
        return Profile(voice_id=voice_id, sha256=sha256, engine=self.name,
                       features={"pitch_hz": 90.0 + seed % 160})

    def cost_s(self, n_items: int, audio_seconds: float) -> float:
        return (self.base_ms + self.per_item_ms * n_items
                + self.per_audio_second_ms * audio_seconds) / 1000

    def synthesize(self, profile: Profile, batch: list[SynthesisItem]) -> list[Synthesized]:
        for item in batch:
            if "[[bench:fail]]" in item.text:
                raise VoiceFactoryError(ErrorCode.ENGINE_ERROR, "bench: injected engine failure")
        if len(batch) > 1 and any("[[bench:oom]]" in item.text for item in batch):
            raise EngineOutOfMemory(f"bench: injected out of memory on a batch of {len(batch)}")
        with self._lock:
            self._running += 1
            self.max_concurrent_seen = max(self.max_concurrent_seen, self._running)
            self.calls += 1
            self.items += len(batch)
        try:
            outputs = [self._audio(profile, item) for item in batch]
            seconds = sum(o.duration_s for o in outputs)
            time.sleep(self.cost_s(len(batch), seconds))
        finally:
            with self._lock:
                self._running -= 1
        return [Synthesized(audio=o, language=item.language or "und")
                for o, item in zip(outputs, batch, strict=True)]

    def _audio(self, profile: Profile, item: SynthesisItem) -> Audio:
        seconds = max(0.3, len(item.text) * self.seconds_per_char) / item.speed
        n = int(seconds * RATE)
        seed = int(hashlib.sha256(f"{profile.voice_id}|{item.text}".encode()).hexdigest()[:8],
                   16)
        rng = np.random.default_rng(seed)
        t = np.arange(n) / RATE
        f0 = profile.features.get("pitch_hz", 140.0)
        voice = sum(np.sin(2 * np.pi * f0 * k * t) / k for k in (1, 2, 3, 4))
        envelope = 0.5 * (1 - np.cos(2 * np.pi * 4.0 * t))  # ~4 syllables a second
        signal = voice * envelope + 0.02 * rng.standard_normal(n)
        peak = float(np.max(np.abs(signal))) or 1.0
        return Audio(samples=(0.3 * signal / peak).astype(np.float32), sample_rate=RATE)
