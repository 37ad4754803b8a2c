"""The espeak engine runs the real espeak-ng binary (a local program, not a server)."""

from __future__ import annotations

import shutil
import subprocess

import numpy as np
import pytest

from pipeline.audio import Audio, speech_seconds
from pipeline.engines import EngineUnavailable, create_engine
from pipeline.engines.base import Profile, StyleHints, SynthesisItem, VoiceMeasures
from pipeline.engines.espeak import (
    EspeakEngine,
    arpabet_to_espeak,
    espeak_text,
    median_f0,
    parse_voices,
)
from topics.errors import ErrorCode, VoiceFactoryError

needs_espeak = pytest.mark.skipif(shutil.which("espeak-ng") is None, reason="espeak-ng missing")
SENTENCE = "This is a reference voice, speaking for a little while today."


@pytest.fixture(scope="module")
def engine() -> EspeakEngine:
    e = EspeakEngine()
    e.load()
    return e


def measures(f0: float | None = None, spread: float | None = None,
             rate: float | None = None) -> VoiceMeasures:
    return VoiceMeasures(np.zeros(256, np.float32), median_f0_hz=f0,
                         f0_range_semitones=spread, speaking_rate=rate)


def profile_of(engine: EspeakEngine, m: VoiceMeasures) -> Profile:
    silence = Audio(np.zeros(16000, np.float32), 16000)
    return engine.profile(voice_id="v", sha256="0", reference=silence, prompt_text=None,
                          measures=m)


def say(engine: EspeakEngine, profile: Profile, text: str = SENTENCE, language: str = "en",
        speed: float = 1.0, style: StyleHints | None = None) -> Audio:
    [out] = engine.synthesize(profile, [SynthesisItem(text, language, speed,
                                                      style=style or StyleHints())])
    return out.audio


def spread_semitones(audio: Audio) -> float:
    rate, frame = audio.sample_rate, int(0.1 * audio.sample_rate)  # pitch per 100 ms
    f0s = [median_f0(Audio(audio.samples[s:s + frame], rate))
           for s in range(0, len(audio.samples) - frame, frame)]
    voiced = np.array([f for f in f0s if f is not None])
    return float(12 * np.log2(np.percentile(voiced, 90) / np.percentile(voiced, 10)))


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


def test_voice_listing_maps_tags_files_and_aliases_by_priority() -> None:
    listing = (
        "Pty Language       Age/Gender VoiceName          File                 Other Languages\n"
        " 5  cmn-latn-pinyin --/M      Chinese_(Mandarin) sit/cmn-Latn-pinyin  (zh-cmn 5)(zh 5)\n"
        " 5  fr-be           --/M      French_(Belgium)   roa/fr-BE            (fr 8)\n"
        " 5  fr-fr           --/M      French_(France)    roa/fr               (fr 5)\n"
        " 5  zh              --/M      chinese-mb-cn1     mb/mb-cn1\n"
    )
    voices = parse_voices(listing)
    assert voices["fr"] == "fr-fr"  # priority 5 beats fr-be's 8
    assert voices["fr-be"] == "fr-be"
    assert voices["zh-cmn"] == voices["zh"] == "cmn-latn-pinyin"  # mbrola voice skipped


def test_arpabet_becomes_espeak_phonemes_with_stress() -> None:
    assert arpabet_to_espeak(("R", "EH1", "D")) == "r'Ed"
    assert arpabet_to_espeak(("HH", "AH0", "L", "OW1")) == "h@l'oU"
    assert arpabet_to_espeak(("T", "AH1", "M", "EY2", "T", "OW0")) == "t'Vm,eItoU"
    assert arpabet_to_espeak(("B", "ER1", "D", "ER0")) == "b'3:d3"


def test_espeak_text_is_escaped_for_ssml() -> None:
    assert espeak_text("salt & <pepper>", "en-us") == "salt &amp; &lt;pepper&gt;"
    assert espeak_text("I read[R][EH1][D] it.", "en-us") == "I [[r'Ed]] it."
    assert espeak_text("I read[R][EH1][D] it.", "fr-fr") == "I read it."  # ARPAbet is English
    assert espeak_text("你好[h][ào]，世界。", "cmn-latn-pinyin") == "ni3 hao4, shi4 jie4."


@needs_espeak
def test_an_annotation_changes_what_espeak_pronounces_for_that_character() -> None:
    def phonemes(body: str, voice: str) -> str:
        return subprocess.run(["espeak-ng", "-q", "-x", "-m", "-v", voice],
                              input=f"<speak>{body}</speak>", capture_output=True, text=True,
                              check=True).stdout.split()[1]

    plain = espeak_text("你好，世界。", "cmn-latn-pinyin")
    marked = espeak_text("你好[h][ào]，世界。", "cmn-latn-pinyin")
    assert (plain, marked) == ("ni3 hao3, shi4 jie4.", "ni3 hao4, shi4 jie4.")
    # espeak-ng reads them with different tone contours on 好 only (3rd tone 21, 4th 51).
    assert phonemes(plain, "cmn-latn-pinyin") != phonemes(marked, "cmn-latn-pinyin")
    read_plain = espeak_text("I read it.", "en-us")
    read_marked = espeak_text("I read[R][EH1][D] it.", "en-us")
    assert phonemes(read_plain, "en-us") == "r'i:d"
    assert phonemes(read_marked, "en-us") == "r'Ed"


@needs_espeak
@pytest.mark.parametrize(("text", "language"), [
    ("你好，欢迎收听。", "zh"), ("早晨，今日天氣好好。", "yue"), ("Good morning.", "en"),
    ("Bonjour tout le monde.", "fr"), ("Guten Morgen.", "de-AT"),
    ("Good day to you, my friend.", "en-GB"),
])
def test_speaks_each_language(engine: EspeakEngine, text: str, language: str) -> None:
    [out] = engine.synthesize(profile_of(engine, measures(120.0)),
                              [SynthesisItem(text, language, 1.0)])
    assert out.language == language.lower()
    assert speech_seconds(out.audio) > 0.5


@needs_espeak
def test_two_references_with_different_f0_give_outputs_with_their_f0(
        engine: EspeakEngine) -> None:
    # Two real "references": espeak-ng speech at a low and a high pitch, measured as the
    # worker measures a reference clip.
    low_ref = engine._run("en-us", 15, 165, 100, f"<speak>{SENTENCE}</speak>")
    high_ref = engine._run("en-us+f3", 70, 165, 100, f"<speak>{SENTENCE}</speak>")
    low_f0, high_f0 = median_f0(low_ref), median_f0(high_ref)
    assert low_f0 is not None and high_f0 is not None
    assert high_f0 > low_f0 * 1.5
    results = {}
    for lang, text in [("en", "Numbers and letters, read out loud to a friend."),
                       ("zh", "你好，欢迎收听今天的新闻。")]:
        low = median_f0(say(engine, profile_of(engine, measures(low_f0)), text, lang))
        high = median_f0(say(engine, profile_of(engine, measures(high_f0)), text, lang))
        assert low is not None and high is not None
        assert low == pytest.approx(low_f0, rel=0.1)
        assert high == pytest.approx(high_f0, rel=0.1)
        results[lang] = (low, high)
    assert all(high > low * 1.5 for low, high in results.values())


@needs_espeak
def test_profile_measures_the_reference_when_the_measures_have_no_pitch(
        engine: EspeakEngine) -> None:
    ref = engine._run("en-us+f3", 60, 165, 100, f"<speak>{SENTENCE}</speak>")
    profile = profile_of(engine, measures())
    measured = engine.profile(voice_id="v", sha256="0", reference=ref, prompt_text=None,
                              measures=measures())
    assert profile.features["median_f0_hz"] == 0.0  # silence: no pitch, espeak's default
    assert measured.features["median_f0_hz"] == pytest.approx(median_f0(ref))
    assert measured.features["female"] == 1.0
    assert profile.features["female"] == 0.0
    assert speech_seconds(say(engine, profile)) > 1.0


@needs_espeak
def test_rate_follows_speed_style_and_the_reference_pace(engine: EspeakEngine) -> None:
    plain = profile_of(engine, measures(110.0))
    normal = say(engine, plain).duration_s
    assert say(engine, plain, speed=2.0).duration_s < normal * 0.7
    assert say(engine, plain, style=StyleHints(speed=0.8)).duration_s > normal * 1.15
    brisk = profile_of(engine, measures(110.0, rate=6.0))
    assert say(engine, brisk).duration_s < normal * 0.85


@needs_espeak
def test_emotion_moves_pitch_modestly(engine: EspeakEngine) -> None:
    p = profile_of(engine, measures(120.0))
    sad = median_f0(say(engine, p, style=StyleHints(emotion="sad")))
    happy = median_f0(say(engine, p, style=StyleHints(emotion="happy")))
    assert sad is not None and happy is not None
    assert sad < happy < sad * 1.4


@needs_espeak
def test_instruct_text_is_parsed_when_no_style_is_given(engine: EspeakEngine) -> None:
    p = profile_of(engine, measures(120.0))
    normal = say(engine, p, "你好，欢迎收听今天的新闻。", "zh").duration_s
    [fast] = engine.synthesize(p, [SynthesisItem("你好，欢迎收听今天的新闻。", "zh", 1.0,
                                                 instruct="说快一点")])
    assert fast.audio.duration_s < normal * 0.9


@needs_espeak
def test_pitch_range_follows_the_reference_spread(engine: EspeakEngine) -> None:
    flat = say(engine, profile_of(engine, measures(120.0, spread=2.0)))
    lively = say(engine, profile_of(engine, measures(120.0, spread=12.0)))
    assert spread_semitones(lively) > spread_semitones(flat) + 1.0


@needs_espeak
def test_language_without_a_voice_is_unsupported_not_retryable(engine: EspeakEngine) -> None:
    with pytest.raises(VoiceFactoryError) as info:
        engine.synthesize(Profile("v", "0", "espeak"), [SynthesisItem("hi", "xx-nowhere", 1.0)])
    assert info.value.code is ErrorCode.UNSUPPORTED_LANGUAGE
    assert not info.value.retryable
    assert "known: af, am" in info.value.message
    assert "espeak-ng --voices" in info.value.message


@needs_espeak
def test_capabilities_list_espeak_languages_and_say_what_is_cloned(
        engine: EspeakEngine) -> None:
    caps = engine.capabilities
    assert caps.languages[:3] == ("zh", "yue", "en")
    assert {"fr", "de", "ja", "hak"} <= set(caps.languages)
    assert "timbre is espeak-ng's own" in caps.cloning


def test_streams_by_sentence_one_chunk_that_is_the_clip(engine: EspeakEngine) -> None:
    p = profile_of(engine, measures(f0=120.0))
    [chunk] = list(engine.synthesize_stream(p, SynthesisItem(SENTENCE, "en", 1.0)))
    assert np.array_equal(chunk.samples, say(engine, p).samples)
    assert engine.capabilities.streaming
