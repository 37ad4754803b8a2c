"""Speaker measurements with the real GE2E encoder (weights from Resemblyzer's wheel)."""

from __future__ import annotations

import numpy as np
import pytest

from pipeline.audio import Audio, decode
from pipeline.speaker import (
    EMBEDDING_DIM,
    SpeakerEncoder,
    cosine,
    count_syllables,
    measure,
    pitch_track,
)
from tests.unit.pipeline.conftest import SENTENCE, espeak_wav


def tone(hz: float, seconds: float = 2.0, rate: int = 24000) -> Audio:
    t = np.arange(int(seconds * rate)) / rate
    return Audio((0.3 * np.sin(2 * np.pi * hz * t)).astype(np.float32), rate)


@pytest.mark.parametrize("hz", [90.0, 150.0, 220.0, 330.0])
def test_pitch_track_of_a_pure_tone(hz: float) -> None:
    f0 = pitch_track(tone(hz))
    assert f0.size > 100
    assert float(np.median(f0)) == pytest.approx(hz, rel=0.02)


def test_silence_has_no_pitch() -> None:
    assert pitch_track(Audio(np.zeros(24000, np.float32), 24000)).size == 0


def test_syllables_of_mixed_text() -> None:
    assert count_syllables("你好世界") == 4
    assert count_syllables("hello beautiful world") == 2 + 3 + 1
    assert count_syllables("我用 Python") == 2 + 2


def test_embedding_is_unit_norm_and_separates_voices(encoder: SpeakerEncoder) -> None:
    low = decode(espeak_wav(pitch=15))
    low_again = decode(espeak_wav("A different sentence spoken by the same voice, slowly "
                                  "and clearly, for the encoder.", pitch=15))
    other = decode(espeak_wav(pitch=15, voice="en-us+f3"))
    e_low, e_again, e_other = (encoder.embed(a) for a in (low, low_again, other))
    assert e_low.shape == (EMBEDDING_DIM,)
    assert float(np.linalg.norm(e_low)) == pytest.approx(1.0, abs=1e-3)
    same, different = cosine(e_low, e_again), cosine(e_low, e_other)
    assert same is not None and different is not None
    assert same > different


def test_silence_embeds_to_zeros_and_has_no_similarity(encoder: SpeakerEncoder) -> None:
    silent = Audio(np.zeros(48000, np.float32), 16000)
    assert not np.any(encoder.embed(silent))
    assert encoder.similarity(silent, np.ones(EMBEDDING_DIM, np.float32)) is None


def test_measure_reports_pitch_and_rate_that_follow_the_voice(encoder: SpeakerEncoder) -> None:
    low = measure(decode(espeak_wav(pitch=10)), SENTENCE, encoder)
    high = measure(decode(espeak_wav(pitch=90)), SENTENCE, encoder)
    assert low.median_f0_hz is not None and high.median_f0_hz is not None
    assert high.median_f0_hz > low.median_f0_hz * 1.3
    assert low.speaking_rate is not None and 2.0 < low.speaking_rate < 8.0
    assert low.f0_range_semitones is not None and low.f0_range_semitones >= 0
    assert measure(decode(espeak_wav()), None, encoder).speaking_rate is None
