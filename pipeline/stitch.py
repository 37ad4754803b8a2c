"""Stitching: the audio of a request's sentences -> one clip.

audios (one per sentence, same sample rate) -> optionally trim each piece's leading and
trailing silence -> join: with `gap_ms` > 0, a fade of `crossfade_ms` at each edge and
`gap_ms` of silence between pieces; with no gap, an equal-power crossfade of
`crossfade_ms` where the pieces overlap -> one float32 `Audio` in [-1, 1].
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from pipeline.audio import Audio, Samples


def stitch(audios: Sequence[Audio], *, gap_ms: float = 150.0, crossfade_ms: float = 10.0,
           trim_db: float | None = None) -> Audio:
    if not audios:
        raise ValueError("stitch needs at least one piece of audio")
    if gap_ms < 0 or crossfade_ms < 0:
        raise ValueError(f"gap_ms and crossfade_ms must be >= 0, got {gap_ms}, {crossfade_ms}")
    rates = sorted({a.sample_rate for a in audios})
    if len(rates) > 1:
        raise ValueError(f"pieces have different sample rates {rates}; resample them first")
    rate = rates[0]
    if len(audios) == 1 and trim_db is None:  # one sentence: nothing to join, one copy
        return Audio(np.clip(audios[0].samples, -1.0, 1.0, dtype=np.float32), rate)
    pieces = [a.samples.astype(np.float32) for a in audios]
    if trim_db is not None:
        pieces = [_trim(p, rate, trim_db) for p in pieces]
    fade = int(rate * crossfade_ms / 1000)
    gap = int(rate * gap_ms / 1000)
    out = pieces[0]
    for nxt in pieces[1:]:
        out = _join_gap(out, nxt, gap, fade) if gap else _crossfade(out, nxt, fade)
    return Audio(np.clip(out, -1.0, 1.0).astype(np.float32), rate)


def _join_gap(a: Samples, b: Samples, gap: int, fade: int) -> Samples:
    a, b = a.copy(), b.copy()
    n = min(fade, len(a))
    if n:
        a[-n:] *= np.linspace(1.0, 0.0, n, dtype=np.float32)
    n = min(fade, len(b))
    if n:
        b[:n] *= np.linspace(0.0, 1.0, n, dtype=np.float32)
    return np.concatenate([a, np.zeros(gap, np.float32), b])


def _crossfade(a: Samples, b: Samples, fade: int) -> Samples:
    n = min(fade, len(a), len(b))
    if n == 0:
        return np.concatenate([a, b])
    # Equal-power curves: no loudness dip mid-overlap, as a linear crossfade of speech gives.
    t = np.linspace(0.0, np.pi / 2, n, dtype=np.float32)
    overlap = a[-n:] * np.cos(t) + b[:n] * np.sin(t)
    return np.concatenate([a[:-n], overlap, b[n:]]).astype(np.float32)


def _trim(x: Samples, rate: int, threshold_db: float) -> Samples:
    frame = max(1, rate // 100)  # 10 ms
    count = len(x) // frame
    if count == 0:
        return x
    rms = np.sqrt(np.mean(x[: count * frame].reshape(count, frame).astype(np.float64) ** 2,
                          axis=1))
    loud = np.flatnonzero(rms > 10 ** (threshold_db / 20))
    if loud.size == 0:
        return x[:0]
    return x[loud[0] * frame: (loud[-1] + 1) * frame]
