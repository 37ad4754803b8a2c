from __future__ import annotations

import numpy as np
import pytest

from pipeline.audio import Audio
from pipeline.stitch import stitch

RATE = 16000


def tone(seconds: float, hz: float = 200.0, level: float = 0.5) -> Audio:
    t = np.arange(int(RATE * seconds)) / RATE
    return Audio((level * np.sin(2 * np.pi * hz * t)).astype(np.float32), RATE)


def test_gap_inserts_silence_and_fades_the_edges() -> None:
    a, b = tone(0.5), tone(0.3, 300)
    out = stitch([a, b], gap_ms=200, crossfade_ms=10)
    assert out.sample_rate == RATE
    assert len(out.samples) == len(a.samples) + int(0.2 * RATE) + len(b.samples)
    gap = out.samples[len(a.samples): len(a.samples) + int(0.2 * RATE)]
    assert np.all(gap == 0)
    assert abs(out.samples[len(a.samples) - 1]) < 1e-3  # faded out, no click
    assert out.samples.dtype == np.float32


def test_crossfade_overlaps_pieces_without_a_dip() -> None:
    a, b = tone(0.5), tone(0.5)
    out = stitch([a, b], gap_ms=0, crossfade_ms=50)
    assert len(out.samples) == len(a.samples) + len(b.samples) - int(0.05 * RATE)
    overlap = out.samples[len(a.samples) - int(0.05 * RATE): len(a.samples)]
    # Equal-power: no dip in level through the overlap.
    assert np.sqrt(np.mean(overlap ** 2)) > 0.3


def test_trim_removes_silence_around_pieces() -> None:
    silence = Audio(np.zeros(RATE // 2, np.float32), RATE)
    padded = Audio(np.concatenate([silence.samples, tone(0.4).samples, silence.samples]), RATE)
    out = stitch([padded, padded], gap_ms=100, crossfade_ms=0, trim_db=-40)
    assert out.duration_s == pytest.approx(0.4 + 0.1 + 0.4, abs=0.03)


def test_one_piece_comes_back_unchanged() -> None:
    a = tone(0.2)
    assert np.array_equal(stitch([a]).samples, a.samples)


def test_output_is_clipped_to_full_scale() -> None:
    loud = tone(0.2, level=1.0)
    out = stitch([loud, loud], gap_ms=0, crossfade_ms=100)
    assert float(np.max(np.abs(out.samples))) <= 1.0


def test_errors() -> None:
    with pytest.raises(ValueError, match="at least one"):
        stitch([])
    with pytest.raises(ValueError, match=r"different sample rates \[16000, 24000\]"):
        stitch([tone(0.1), Audio(np.zeros(100, np.float32), 24000)])
    with pytest.raises(ValueError, match=">= 0"):
        stitch([tone(0.1)], gap_ms=-1)
