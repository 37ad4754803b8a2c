from __future__ import annotations

import pytest

from pipeline.text import guess_language, hanzi_to_pinyin, route


def test_hanzi_become_numbered_pinyin_with_neutral_tone_five() -> None:
    assert hanzi_to_pinyin("你好，世界。") == "ni3 hao3, shi4 jie4."
    assert hanzi_to_pinyin("我的") == "wo3 de5"


def test_latin_runs_pass_through_between_syllables() -> None:
    assert hanzi_to_pinyin("我用AI配音") == "wo3 yong4 AI pei4 yin1"


@pytest.mark.parametrize(("text", "expected"), [
    ("今天天气很好", "zh"), ("Good morning", "en"), ("OK 好的好的好的", "zh"), ("", "en"),
])
def test_guess_language_by_script(text: str, expected: str) -> None:
    assert guess_language(text) == expected


def test_mandarin_routes_to_the_pinyin_voice_not_the_broken_cmn_voice() -> None:
    r = route("你好", None)
    assert (r.language, r.voice, r.text) == ("zh", "cmn-latn-pinyin", "ni3 hao3")


@pytest.mark.parametrize("tag", ["yue", "zh-HK", "zh_yue", "Cantonese"])
def test_cantonese_tags_route_to_yue_with_hanzi_kept(tag: str) -> None:
    r = route("早晨。", tag)
    assert (r.language, r.voice) == ("yue", "yue")
    assert r.text.startswith("早晨")


def test_other_tags_are_passed_to_espeak_as_voice_names() -> None:
    assert route("Bonjour", "fr").voice == "fr"
    assert route("Hello", "en").voice == "en-us"
