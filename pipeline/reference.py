"""Reference clip validation (DESIGN.md "Voice profiles"), run by the CLI before upload and
again by the worker. Each broken rule is named with the measured value and the limit."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from pipeline.audio import Audio, AudioDecodeError, decode, speech_seconds

MAX_BYTES = 20 * 1024 * 1024
MIN_SPEECH_S = 3.0
MAX_SPEECH_S = 30.0
MIN_RATE = 16000
MAX_CLIPPED = 0.01


@dataclass(frozen=True)
class ReferenceReport:
    ok: bool
    problems: list[str]
    audio: Audio | None
    speech_s: float = 0.0
    peak_dbfs: float = float("-inf")
    clipped_ratio: float = 0.0


def check_reference(data: bytes) -> ReferenceReport:
    if len(data) > MAX_BYTES:
        return ReferenceReport(False, [f"reference too large: {len(data) / 2**20:.1f} MiB, "
                                       f"limit {MAX_BYTES / 2**20:.0f} MiB"], None)
    try:
        audio = decode(data)
    except AudioDecodeError as exc:
        return ReferenceReport(False, [f"reference undecodable: {exc}"], None)
    problems: list[str] = []
    samples = audio.samples
    peak = float(np.max(np.abs(samples))) if samples.size else 0.0
    peak_dbfs = 20 * np.log10(peak) if peak > 0 else float("-inf")
    clipped = float(np.mean(np.abs(samples) >= 0.999)) if samples.size else 0.0
    speech = speech_seconds(audio)
    if audio.sample_rate < MIN_RATE:
        problems.append(f"reference sample rate too low: {audio.sample_rate} Hz, "
                        f"need >= {MIN_RATE} Hz")
    if peak_dbfs < -50:
        problems.append(f"reference is silent: peak {peak_dbfs:.1f} dBFS")
    elif speech < MIN_SPEECH_S:
        problems.append(f"reference too short: {speech:.1f} s of speech, "
                        f"need >= {MIN_SPEECH_S:.1f} s")
    if speech > MAX_SPEECH_S:
        problems.append(f"reference too long: {speech:.1f} s of speech, "
                        f"limit {MAX_SPEECH_S:.0f} s")
    if clipped > MAX_CLIPPED:
        problems.append(f"reference is clipped: {clipped:.1%} of samples at full scale, "
                        f"limit {MAX_CLIPPED:.0%}")
    return ReferenceReport(not problems, problems, audio, speech, peak_dbfs, clipped)
