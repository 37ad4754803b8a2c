"""The engine protocol every synthesizer implements (DESIGN.md "Engines").

load() once at start-up -> profile(reference, prompt_text) per voice -> synthesize(batch)
for groups of requests of one voice. Engines raise `VoiceFactoryError` with `engine_error`
(retryable) or `unsupported_language` (not retryable).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

from pipeline.audio import Audio
from topics.errors import ErrorCode, VoiceFactoryError


class EngineUnavailable(RuntimeError):
    """The engine cannot start here (binary or weights missing); message says what to do."""


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


@dataclass(frozen=True)
class Profile:
    """What an engine keeps of a reference: features plus the reference's hash."""

    voice_id: str
    sha256: str
    engine: str
    features: dict[str, float] = field(default_factory=dict)


@dataclass(frozen=True)
class SynthesisItem:
    text: str
    language: str | None
    speed: float
    instruct: str | None = None


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
                prompt_text: str | None) -> Profile: ...

    def synthesize(self, profile: Profile, batch: list[SynthesisItem]) -> list[Synthesized]: ...
