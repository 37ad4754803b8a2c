"""The espeak engine runs the real espeak-ng binary (a local program, not a server)."""

from __future__ import annotations

import shutil

import numpy as np
import pytest

from pipeline.audio import Audio, speech_seconds
from pipeline.engines import EngineUnavailable, create_engine
from pipeline.engines.base import Profile, SynthesisItem
from pipeline.engines.espeak import EspeakEngine, median_f0
from topics.errors import ErrorCode, VoiceFactoryError

needs_espeak = pytest.mark.skipif(shutil.which("espeak-ng") is None, reason="espeak-ng missing")


def test_median_f0_of_a_pure_tone() -> None:
    rate = 16000
    t = np.arange(rate * 2) / rate
    f0 = median_f0(Audio((0.5 * np.sin(2 * np.pi * 150 * t)).astype(np.float32), rate))
    assert f0 == pytest.approx(150, rel=0.03)
    assert median_f0(Audio(np.zeros(rate, np.float32), rate)) is None


def test_unknown_engine_names_what_exists() -> None:
    with pytest.raises(EngineUnavailable, match="available in this build: espeak"):
        create_engine("nope")


def test_missing_binary_fails_at_load_with_an_install_hint() -> None:
    with pytest.raises(EngineUnavailable, match="apt-get install espeak-ng"):
        EspeakEngine(binary="espeak-ng-not-installed").load()


@needs_espeak
@pytest.mark.parametrize(("text", "language"), [
    ("你好，欢迎收听。", "zh"), ("早晨，今日天氣好好。", "yue"), ("Good morning.", "en"),
])
def test_speaks_each_language(text: str, language: str) -> None:
    engine = EspeakEngine()
    engine.load()
    profile = Profile("v", "0" * 64, "espeak", {"espeak_pitch": 50.0})
    [out] = engine.synthesize(profile, [SynthesisItem(text, language, 1.0)])
    assert out.language == language
    assert speech_seconds(out.audio) > 0.5


@needs_espeak
def test_pitch_follows_the_reference_and_speed_shortens() -> None:
    engine = EspeakEngine()
    engine.load()
    plain = Profile("v", "0", "espeak", {"espeak_pitch": 50.0})
    [ref_low] = engine.synthesize(Profile("v", "0", "espeak", {"espeak_pitch": 10.0}),
                                  [SynthesisItem("This is a reference voice.", "en", 1.0)])
    [ref_high] = engine.synthesize(Profile("v", "0", "espeak", {"espeak_pitch": 90.0}),
                                   [SynthesisItem("This is a reference voice.", "en", 1.0)])
    low = engine.profile(voice_id="v", sha256="0", reference=ref_low.audio, prompt_text=None)
    high = engine.profile(voice_id="v", sha256="0", reference=ref_high.audio, prompt_text=None)
    assert low.features["espeak_pitch"] < high.features["espeak_pitch"]
    [normal] = engine.synthesize(plain, [SynthesisItem("one two three four five", "en", 1.0)])
    [fast] = engine.synthesize(plain, [SynthesisItem("one two three four five", "en", 2.0)])
    assert fast.audio.duration_s < normal.audio.duration_s * 0.8


@needs_espeak
def test_language_without_a_voice_is_unsupported_not_retryable() -> None:
    engine = EspeakEngine()
    engine.load()
    with pytest.raises(VoiceFactoryError) as info:
        engine.synthesize(Profile("v", "0", "espeak"), [SynthesisItem("hi", "xx-nowhere", 1.0)])
    assert info.value.code is ErrorCode.UNSUPPORTED_LANGUAGE
    assert not info.value.retryable
