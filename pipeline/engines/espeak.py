"""espeak-ng engine: real multilingual speech on the CPU, pitch matched to the reference.

text -> `pipeline.text.route` (voice + pinyin for Mandarin) -> `espeak-ng --stdout` with
pitch from the profile and rate from the request's speed -> WAV bytes -> `Audio`.
It does not clone timbre: the profile carries the reference's median pitch only.
"""

from __future__ import annotations

import math
import shutil
import subprocess

import numpy as np

from pipeline.audio import Audio, AudioDecodeError, decode
from pipeline.engines.base import (
    Capabilities,
    EngineUnavailable,
    Profile,
    SynthesisItem,
    Synthesized,
)
from pipeline.text import route
from topics.errors import ErrorCode, VoiceFactoryError

BASE_RATE_WPM = 165
DEFAULT_PITCH = 50
_TIMEOUT_S = 60


class EspeakEngine:
    name = "espeak"

    def __init__(self, binary: str = "espeak-ng") -> None:
        self._binary = binary
        self._voices: set[str] = set()

    @property
    def capabilities(self) -> Capabilities:
        return Capabilities(
            languages=("zh", "yue", "en", *sorted(self._voices)[:0]),
            modes=("zero_shot", "cross_lingual", "sft"),
            batching=False,
            streaming=False,
            cloning="median pitch of the reference only; timbre is espeak-ng's own",
        )

    def load(self) -> None:
        path = shutil.which(self._binary)
        if path is None:
            raise EngineUnavailable(f"{self._binary} not found on PATH; install it with "
                                    "`apt-get install espeak-ng` (or `make setup`)")
        listing = subprocess.run([path, "--voices"], capture_output=True, text=True,
                                 check=True, timeout=_TIMEOUT_S).stdout
        for line in listing.splitlines()[1:]:
            parts = line.split()
            if len(parts) >= 4:
                self._voices.update({parts[1].lower(), parts[3].split("/")[-1].lower()})

    def profile(self, *, voice_id: str, sha256: str, reference: Audio,
                prompt_text: str | None) -> Profile:
        f0 = median_f0(reference)
        pitch = DEFAULT_PITCH if f0 is None else _pitch_for(f0)
        return Profile(voice_id=voice_id, sha256=sha256, engine=self.name,
                       features={"median_f0_hz": f0 or 0.0, "espeak_pitch": float(pitch)})

    def synthesize(self, profile: Profile, batch: list[SynthesisItem]) -> list[Synthesized]:
        return [self._one(profile, item) for item in batch]

    def _one(self, profile: Profile, item: SynthesisItem) -> Synthesized:
        target = route(item.text, item.language)
        if self._voices and target.voice.lower() not in self._voices:
            raise VoiceFactoryError(ErrorCode.UNSUPPORTED_LANGUAGE,
                                    f"language {target.language!r} has no espeak-ng voice")
        pitch = int(profile.features.get("espeak_pitch", DEFAULT_PITCH))
        rate = round(BASE_RATE_WPM * item.speed)
        cmd = [self._binary, "-v", target.voice, "-p", str(pitch), "-s", str(rate),
               "--stdin", "--stdout"]
        try:
            done = subprocess.run(cmd, input=target.text.encode("utf-8"), capture_output=True,
                                  timeout=_TIMEOUT_S, check=False)
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise VoiceFactoryError(ErrorCode.ENGINE_ERROR, f"espeak-ng failed: {exc}") from exc
        if done.returncode != 0:
            raise VoiceFactoryError(ErrorCode.ENGINE_ERROR,
                                    f"espeak-ng exited {done.returncode}: "
                                    f"{done.stderr.decode(errors='replace')[:200]}")
        try:
            audio = decode(done.stdout)
        except AudioDecodeError as exc:
            raise VoiceFactoryError(ErrorCode.ENGINE_ERROR, str(exc)) from exc
        return Synthesized(audio=audio, language=target.language)


def _pitch_for(f0_hz: float) -> int:
    # espeak-ng's pitch 50 is about 120 Hz for its default voices; one octave ~ 40 steps.
    return max(0, min(99, round(DEFAULT_PITCH + 40 * math.log2(f0_hz / 120.0))))


def median_f0(audio: Audio, fmin: float = 60.0, fmax: float = 400.0) -> float | None:
    """Median pitch of voiced 40-ms frames by normalised autocorrelation; None if unvoiced."""
    rate = audio.sample_rate
    frame = int(0.04 * rate)
    hop = frame // 2
    x = audio.samples.astype(np.float64)
    lo, hi = int(rate / fmax), int(rate / fmin)
    estimates = []
    for start in range(0, len(x) - frame, hop):
        seg = x[start : start + frame]
        seg = seg - seg.mean()
        energy = float(np.dot(seg, seg))
        if energy < 1e-4 * frame:
            continue
        corr = np.correlate(seg, seg, mode="full")[frame - 1 :]
        window = corr[lo : min(hi, frame - 1)]
        if window.size == 0:
            continue
        lag = int(np.argmax(window)) + lo
        if corr[lag] / energy > 0.5:
            estimates.append(rate / lag)
    return float(np.median(estimates)) if estimates else None
