"""The engine protocol every synthesizer implements (DESIGN.md "Engines").

load() once at start-up -> profile(reference, prompt_text) per voice -> synthesize(batch)
for groups of requests of one voice (or, for an engine that is also a `VoiceMixer`,
synthesize_voices(batch) for items of several voices in one call), or
synthesize_stream(item) for one sentence of a streamed request (`Audio` chunks in order, as
the engine makes them; concatenated, they are the sentence's clip). Engines raise
`VoiceFactoryError` with `engine_error` (retryable) or `unsupported_language` (not
retryable).
"""

from __future__ import annotations

from collections.abc import Generator, Iterator
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

import numpy as np

from pipeline.audio import Audio
from topics.errors import ErrorCode, LocalError, VoiceFactoryError

# What synthesize_stream implementations return: a generator, so a caller can close() it.
AudioStream = Generator[Audio, None, None]


class EngineUnavailable(LocalError, RuntimeError):
    """The engine cannot start here (binary or weights missing); message says what to do."""

    default_code = ErrorCode.ENGINE_ERROR


class EngineOutOfMemory(VoiceFactoryError):
    """The device ran out of memory on a batch: the caller retries it smaller."""

    def __init__(self, message: str) -> None:
        super().__init__(ErrorCode.ENGINE_ERROR, message, retryable=True)


@dataclass(frozen=True)
class Capabilities:
    languages: tuple[str, ...]
    modes: tuple[str, ...]
    batching: bool
    streaming: bool
    cloning: str  # what of the reference the engine reproduces, in words
    speech: bool = True  # real speech, worth a speaker-similarity score (bench: False)


@dataclass(frozen=True)
class VoiceMeasures:
    """Engine-independent measurements of a reference (pipeline.speaker computes them).

    `embedding` is the GE2E speaker embedding (256 floats, unit norm); pitch and rate are
    None where the reference gives no reliable estimate (unvoiced, no transcript).
    """

    embedding: np.ndarray
    median_f0_hz: float | None = None
    f0_range_semitones: float | None = None  # 10th..90th percentile of voiced frames
    speaking_rate: float | None = None  # syllables per second of speech


@dataclass(frozen=True)
class Profile:
    """What an engine keeps of a reference, persisted as one safetensors file.

    `features` are scalars (median_f0_hz, espeak_pitch, ...), `tensors` are arrays
    (speaker embedding, prompt speech tokens, prompt mel), `text` holds strings
    (prompt_text). Everything must survive a safetensors round trip.
    """

    voice_id: str
    sha256: str
    engine: str
    features: dict[str, float] = field(default_factory=dict)
    tensors: dict[str, np.ndarray] = field(default_factory=dict)
    text: dict[str, str] = field(default_factory=dict)

    @property
    def nbytes(self) -> int:
        """Approximate resident size, for the LRU's byte bound."""
        return (sum(a.nbytes for a in self.tensors.values()) + 64 * len(self.features)
                + sum(len(v.encode()) for v in self.text.values()) + 256)


@dataclass(frozen=True)
class StyleHints:
    """What the text front-end understood of an instruction (pipeline.frontend).

    Structured cues engines can act on; `free_text` is the instruction as given, for
    engines that take natural language (CosyVoice instruct2).
    """

    dialect: str | None = None  # e.g. "sichuan", "cantonese", "shanghai"
    emotion: str | None = None  # e.g. "sad", "happy", "angry", "calm"
    persona: str | None = None  # e.g. "news_anchor", "storyteller", "child"
    speed: float | None = None  # multiplier the instruction asks for ("说慢一点" -> 0.8)
    free_text: str | None = None


@dataclass(frozen=True)
class SynthesisItem:
    """One piece of text for the engine: a sentence (or a short request) after the front-end.

    `text` is normalised (numbers, dates read out) and may still carry `[h][ào]` pinyin or
    `[AH0]` phoneme annotations, already validated, for the engine to honour.
    """

    text: str
    language: str | None
    speed: float
    instruct: str | None = None
    style: StyleHints = field(default_factory=StyleHints)


@dataclass(frozen=True)
class Synthesized:
    audio: Audio
    language: str


class Synthesizer(Protocol):
    name: str

    @property
    def capabilities(self) -> Capabilities: ...

    def load(self) -> None: ...

    def profile(self, *, voice_id: str, sha256: str, reference: Audio,
                prompt_text: str | None, measures: VoiceMeasures) -> Profile: ...

    def synthesize(self, profile: Profile, batch: list[SynthesisItem]) -> list[Synthesized]: ...

    def synthesize_stream(self, profile: Profile, item: SynthesisItem) -> Iterator[Audio]:
        """One item as a stream of mono float32 chunks, in order, all at one sample rate.

        Errors are raised as in synthesize, before the first chunk or between chunks. The
        caller may stop early: closing the iterator (a generator's close()) releases what
        the engine holds for the call.
        """
        ...


@runtime_checkable
class VoiceMixer(Protocol):
    """An engine whose one call can hold items of several voices, each with its own profile
    (a GPU batch of prompts). The worker then fills a batch across voices instead of one
    voice's queue only, so requests of voices that never have company still share a call."""

    def synthesize_voices(self, batch: list[tuple[Profile, SynthesisItem]]
                          ) -> list[Synthesized]: ...
