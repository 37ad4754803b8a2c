"""Integrated loudness (ITU-R BS.1770-4) and normalisation to a target LUFS.

samples -> K-weighting (a high shelf and a high-pass biquad, designed for the clip's own
rate from the standard's analog parameters, run as IIR filters by scipy) -> mean square of
400-ms blocks every 100 ms (cumulative sums, no Python loop) -> absolute gate at -70 LUFS,
relative gate 10 LU below -> LUFS.

Normalising is then mostly arithmetic: loudness moves exactly with a gain, so the clip is
measured once, and once more only when the soft limiter had to bend peaks. The torchaudio
implementation this replaced (an FIR path in torch) was the largest single cost of a worker
(38 % of its CPU in the capacity benchmark).
"""

from __future__ import annotations

import math
from functools import cache

import numpy as np
from scipy.signal import sosfilt

from pipeline.audio import Audio

PEAK_CEILING = 10 ** (-1.0 / 20)  # -1 dBFS: headroom for lossy codecs' overshoot
_MIN_LOUDNESS_S = 0.4  # one gating block; shorter clips are measured by plain RMS
_BLOCK_S, _STEP_S = 0.4, 0.1
_ABSOLUTE_GATE = -70.0
_RELATIVE_GATE = -10.0
_OFFSET = -0.691  # BS.1770's constant, so that a 997-Hz full-scale sine reads -3.01 LUFS


@cache
def k_weighting(rate: int) -> np.ndarray:
    """Second-order sections of BS.1770's K-weighting filter at `rate`."""
    # Stage 1: the head's acoustic effect, a high shelf of about +4 dB above ~1.7 kHz.
    f0, gain_db, q = 1681.974450955533, 3.999843853973347, 0.7071752369554196
    k = math.tan(math.pi * f0 / rate)
    vh = 10 ** (gain_db / 20)
    vb = vh**0.4996667741545416
    a0 = 1 + k / q + k * k
    shelf = [(vh + vb * k / q + k * k) / a0, 2 * (k * k - vh) / a0,
             (vh - vb * k / q + k * k) / a0, 1.0, 2 * (k * k - 1) / a0, (1 - k / q + k * k) / a0]
    # Stage 2: the revised low-frequency B-curve, a high-pass around 38 Hz.
    f0, q = 38.13547087602444, 0.5003270373238773
    k = math.tan(math.pi * f0 / rate)
    a0 = 1 + k / q + k * k
    highpass = [1.0, -2.0, 1.0, 1.0, 2 * (k * k - 1) / a0, (1 - k / q + k * k) / a0]
    return np.array([shelf, highpass])


def loudness_lufs(audio: Audio) -> float:
    """Integrated loudness in LUFS; -inf for silence."""
    x = audio.samples.astype(np.float64)
    if not x.size or not np.any(x):
        return float("-inf")
    if audio.duration_s < _MIN_LOUDNESS_S:
        power = float(np.mean(x * x))
        return _OFFSET + 10 * math.log10(power) if power > 0 else float("-inf")
    weighted = sosfilt(k_weighting(audio.sample_rate), x)
    block, step = int(_BLOCK_S * audio.sample_rate), int(_STEP_S * audio.sample_rate)
    energy = np.concatenate([[0.0], np.cumsum(weighted * weighted)])
    starts = np.arange(0, len(x) - block + 1, step)
    z = (energy[starts + block] - energy[starts]) / block
    z = z[z > 0]
    if not z.size:
        return float("-inf")
    levels = _OFFSET + 10 * np.log10(z)
    z = z[levels > _ABSOLUTE_GATE]
    if not z.size:
        return float("-inf")
    relative = _OFFSET + 10 * math.log10(float(np.mean(z))) + _RELATIVE_GATE
    gated = z[(_OFFSET + 10 * np.log10(z)) > relative]
    return _OFFSET + 10 * math.log10(float(np.mean(gated)))


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

    Returns the new audio and its loudness before and after; "after" still falls short of
    the target for a clip that is nearly all peaks (the quality check names it).
    """
    measured = loudness_lufs(audio)
    if not math.isfinite(measured):
        return audio, measured, measured
    gain = 10 ** ((target_lufs - measured) / 20)
    samples = audio.samples * np.float32(gain)
    if float(np.max(np.abs(samples))) <= PEAK_CEILING * 0.5:  # the limiter's knee
        return Audio(samples, audio.sample_rate), measured, target_lufs
    after = measured
    for _ in range(3):  # limit, measure, make up what the limiter took (capped by the ceiling)
        samples = soft_limit(samples)
        after = loudness_lufs(Audio(samples, audio.sample_rate))
        peak = float(np.max(np.abs(samples)))
        makeup_db = min(target_lufs - after, 20 * math.log10(PEAK_CEILING / peak))
        if makeup_db < 0.1:
            break
        samples = samples * np.float32(10 ** (makeup_db / 20))
        after += makeup_db
    samples = np.clip(samples, -PEAK_CEILING, PEAK_CEILING).astype(np.float32)
    return Audio(samples, audio.sample_rate), measured, after
