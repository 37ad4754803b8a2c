"""Quality signals on one output: speaker similarity, loudness and named warnings.

output audio + the profile's reference embedding -> GE2E embedding of the output -> cosine
(`quality.speaker_similarity`); the delivered level (`quality.loudness_lufs`, after
normalisation) and the engine's (`quality.loudness_input_lufs`, before it); the output's
level, clipping and duration against what the text predicts -> `quality.warnings`.
Warnings never fail a request: they tell the producer (and a dashboard) which clips
deserve a listen.
"""

from __future__ import annotations

import numpy as np

from pipeline.audio import Audio
from pipeline.speaker import SpeakerEncoder, count_syllables
from topics.events import Quality

CLIPPED_WARN = 0.001  # of samples at full scale before limiting
QUIET_WARN_LU = 6.0  # this far below the loudness target after gain is "too quiet"
NEAR_SILENT_LUFS = -50.0  # engine output this quiet is mostly noise once amplified
DEFAULT_SYLLABLES_PER_S = 4.0  # conversational speech in zh and en
DURATION_LOW, DURATION_HIGH = 0.4, 2.5  # ratio of actual to predicted duration


def predicted_seconds(text: str, speaking_rate: float | None, speed: float) -> float:
    rate = speaking_rate or DEFAULT_SYLLABLES_PER_S
    return count_syllables(text) / (rate * speed)


def warnings_for(raw: Audio, *, text: str, loudness_before: float, loudness_after: float,
                 target_lufs: float, speaking_rate: float | None, speed: float) -> list[str]:
    found: list[str] = []
    samples = raw.samples
    # Peaks first: a clip that never reaches full scale (almost all) costs two reductions.
    peak = max(float(samples.max()), -float(samples.min())) if samples.size else 0.0
    clipped = (float(np.count_nonzero(np.abs(samples) >= 0.999)) / samples.size
               if peak >= 0.999 else 0.0)
    if clipped > CLIPPED_WARN:
        found.append(f"clipping: {clipped:.2%} of engine samples at full scale")
    if not np.isfinite(loudness_before):
        found.append("silent: the engine returned no signal")
    elif loudness_before < NEAR_SILENT_LUFS:
        found.append(f"too quiet: engine output {loudness_before:.1f} LUFS before gain, "
                     f"below {NEAR_SILENT_LUFS:.0f}")
    elif loudness_after < target_lufs - QUIET_WARN_LU:
        found.append(f"too quiet: {loudness_after:.1f} LUFS after the peak limit, target "
                     f"{target_lufs:.0f} LUFS")
    expected = predicted_seconds(text, speaking_rate, speed)
    if expected >= 0.5 and raw.duration_s:
        ratio = raw.duration_s / expected
        if not DURATION_LOW <= ratio <= DURATION_HIGH:
            found.append(f"duration {raw.duration_s:.2f} s is {ratio:.1f}x the "
                         f"{expected:.2f} s the text predicts")
    return found


def assess(raw: Audio, final: Audio, *, text: str, reference_embedding: np.ndarray | None,
           encoder: SpeakerEncoder | None, loudness_before: float, loudness_after: float,
           target_lufs: float, speaking_rate: float | None, speed: float) -> Quality:
    similarity = None
    if encoder is not None and reference_embedding is not None:
        similarity = encoder.similarity(final, reference_embedding)
    return Quality(
        speaker_similarity=similarity,
        # The delivered file's level first (what a loudness meter on it reads), the engine's
        # own under its name: quality.loudness_lufs used to be the latter, which confused.
        loudness_lufs=round(loudness_after, 2) if np.isfinite(loudness_after) else None,
        loudness_input_lufs=(round(loudness_before, 2) if np.isfinite(loudness_before)
                             else None),
        warnings=warnings_for(raw, text=text, loudness_before=loudness_before,
                              loudness_after=loudness_after, target_lufs=target_lufs,
                              speaking_rate=speaking_rate, speed=speed))
