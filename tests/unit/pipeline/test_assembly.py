"""Assembly: clips at their timeline positions in one track, at one sample rate."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from pipeline.assembly import assemble, track_rate
from pipeline.audio import Audio
from pipeline.subtitles import lay_out
from topics.events import ClipSpan


def _tone(seconds: float, rate: int, freq: float = 440.0, amp: float = 0.5) -> Audio:
    t = np.arange(round(seconds * rate)) / rate
    return Audio(samples=(amp * np.sin(2 * np.pi * freq * t)).astype(np.float32),
                 sample_rate=rate)


def _rms(audio: Audio, start_s: float, end_s: float) -> float:
    a, b = round(start_s * audio.sample_rate), round(end_s * audio.sample_rate)
    return float(np.sqrt(np.mean(audio.samples[a:b].astype(np.float64) ** 2)))


def test_the_rate_is_the_one_most_clips_have_and_the_higher_on_a_tie() -> None:
    assert track_rate([22050, 24000, 22050]) == 22050
    assert track_rate([16000, 24000]) == 24000
    with pytest.raises(ValueError, match="no clips"):
        track_rate([])


def test_clips_sit_at_their_spans_with_silence_in_the_gaps() -> None:
    clips = [_tone(1.0, 24000), _tone(0.5, 22050, freq=300), _tone(0.8, 24000)]
    spans = lay_out([(i, c.duration_s) for i, c in enumerate(clips)], gap_s=0.3)
    track = assemble(list(zip(spans, clips, strict=True)))
    assert track.sample_rate == 24000
    assert len(track.samples) == round(spans[-1].end_s * 24000)
    assert track.duration_s == pytest.approx(1.0 + 0.3 + 0.5 + 0.3 + 0.8, abs=1e-4)
    for span in spans:  # the clip is there (sine at 0.5 amplitude: rms ~0.354) ...
        assert _rms(track, span.start_s + 0.01, span.end_s - 0.01) == pytest.approx(0.354,
                                                                                    abs=0.02)
    for left, right in itertools.pairwise(spans):  # ... and the gap is silent
        assert _rms(track, left.end_s + 0.005, right.start_s - 0.005) == 0.0


def test_a_clip_longer_than_its_span_is_cut_and_a_shorter_one_padded() -> None:
    long, short = _tone(1.2, 16000), _tone(0.2, 16000)
    spans = [ClipSpan(index=0, start_s=0.0, end_s=1.0), ClipSpan(index=1, start_s=1.0,
                                                                  end_s=1.5)]
    track = assemble([(spans[0], long), (spans[1], short)])
    assert len(track.samples) == 24000
    assert _rms(track, 1.25, 1.5) == 0.0  # after the short clip: padding, not the long one
    assert _rms(track, 1.0, 1.19) > 0.3


def test_an_explicit_rate_resamples_every_clip() -> None:
    span = ClipSpan(index=0, start_s=0.0, end_s=0.5)
    track = assemble([(span, _tone(0.5, 22050))], sample_rate=48000)
    assert track.sample_rate == 48000 and len(track.samples) == 24000


def test_nothing_to_assemble_is_an_error() -> None:
    with pytest.raises(ValueError, match="no clips"):
        assemble([])
