"""Output encoding: `Audio` -> loudness-normalised bytes in the requested format and rate.

engine audio -> resample (soxr) -> normalise to the target integrated loudness (ITU-R
BS.1770 through torchaudio, peaks kept under -1 dBFS) -> container from libsndfile, which
writes WAV (PCM16), FLAC, MP3 and Ogg/Opus. Opus only runs at 8/12/16/24/48 kHz, so a
request for opus without a sample rate is encoded at 48 kHz (validation refuses others).
"""

from __future__ import annotations

import io

import numpy as np
import soundfile as sf
import soxr

from pipeline.audio import Audio

PEAK_CEILING = 10 ** (-1.0 / 20)  # -1 dBFS: headroom for lossy codecs' overshoot
_MIN_LOUDNESS_S = 0.4  # BS.1770 gates 400-ms blocks; shorter clips are measured by RMS

CONTENT_TYPES = {"wav": "audio/wav", "flac": "audio/flac", "mp3": "audio/mpeg",
                 "opus": "audio/ogg; codecs=opus"}
_CONTAINERS = {"wav": ("WAV", "PCM_16"), "flac": ("FLAC", "PCM_16"),
               "mp3": ("MP3", "MPEG_LAYER_III"), "opus": ("OGG", "OPUS")}
_OPUS_RATES = (8000, 12000, 16000, 24000, 48000)


def target_rate(fmt: str, requested: int | None, native: int) -> int:
    rate = requested or native
    if fmt == "opus" and rate not in _OPUS_RATES:
        rate = 48000
    return rate


def resample(audio: Audio, rate: int) -> Audio:
    if rate == audio.sample_rate:
        return audio
    out = soxr.resample(audio.samples, audio.sample_rate, rate).astype(np.float32)
    return Audio(samples=out, sample_rate=rate)


def loudness_lufs(audio: Audio) -> float:
    """Integrated loudness in LUFS; -inf for silence."""
    samples = audio.samples
    if not samples.size or not np.any(samples):
        return float("-inf")
    if audio.duration_s < _MIN_LOUDNESS_S:
        rms = float(np.sqrt(np.mean(samples.astype(np.float64) ** 2)))
        return 20 * float(np.log10(rms)) - 0.691 if rms > 0 else float("-inf")
    import torch
    import torchaudio.functional as taf

    wave = torch.from_numpy(np.ascontiguousarray(samples)).unsqueeze(0)
    value = float(taf.loudness(wave, audio.sample_rate))
    return value if np.isfinite(value) else float("-inf")


def soft_limit(samples: np.ndarray, ceiling: float = PEAK_CEILING,
               knee: float = 0.5) -> np.ndarray:
    """Samples above `knee * ceiling` bend smoothly (tanh) towards `ceiling`, never past it.

    Speech from formant synthesisers is peaky (crest factor 20 dB and more): a plain gain
    to -16 LUFS would clip, a plain peak cap would leave it 5 dB short of the target.
    """
    threshold = knee * ceiling
    magnitude = np.abs(samples)
    over = magnitude > threshold
    if not np.any(over):
        return samples
    out = samples.copy()
    room = ceiling - threshold
    out[over] = np.sign(samples[over]) * (threshold + room * np.tanh(
        (magnitude[over] - threshold) / room))
    return out


def normalize_loudness(audio: Audio, target_lufs: float) -> tuple[Audio, float, float]:
    """Gain to `target_lufs` with a soft limiter keeping peaks under -1 dBFS.

    Up to four passes: gain, limit, measure, make up what the limiter took (capped by the ceiling).
    Returns the new audio and its loudness before and after; "after" still falls short of
    the target for a clip that is nearly all peaks (the quality check names it).
    """
    measured = loudness_lufs(audio)
    if not np.isfinite(measured):
        return audio, measured, measured
    samples = audio.samples * np.float32(10 ** ((target_lufs - measured) / 20))
    for _ in range(4):
        samples = soft_limit(samples)
        now = loudness_lufs(Audio(samples, audio.sample_rate))
        peak = float(np.max(np.abs(samples)))
        makeup_db = min(target_lufs - now, 20 * float(np.log10(PEAK_CEILING / peak)))
        if makeup_db < 0.05:
            break
        samples = samples * np.float32(10 ** (makeup_db / 20))
    out = Audio(np.clip(samples, -PEAK_CEILING, PEAK_CEILING).astype(np.float32),
                audio.sample_rate)
    return out, measured, loudness_lufs(out)


def encode(audio: Audio, fmt: str) -> bytes:
    container, subtype = _CONTAINERS[fmt]
    buf = io.BytesIO()
    sf.write(buf, np.clip(audio.samples, -1.0, 1.0), audio.sample_rate, format=container,
             subtype=subtype)
    return buf.getvalue()
