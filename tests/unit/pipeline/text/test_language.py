from __future__ import annotations

import pytest

from pipeline.text.language import detect, guess_language, normalise_tag
from topics.errors import ErrorCode, InvalidRequest


@pytest.mark.parametrize(("tag", "expected"), [
    ("zh", "zh"), ("zh-CN", "zh"), ("zh_Hans", "zh"), ("cmn", "zh"), ("Mandarin", "zh"),
    ("zh-TW", "zh"), ("yue", "yue"), ("zh-HK", "yue"), ("zh_yue", "yue"), ("Cantonese", "yue"),
    ("en", "en"), ("en-US", "en"), ("English", "en"), ("en-GB", "en-gb"), ("fr", "fr"),
    (" de ", "de"),
])
def test_tags_normalise_to_the_pipeline_names(tag: str, expected: str) -> None:
    assert normalise_tag(tag) == expected


@pytest.mark.parametrize("tag", ["", "x", "english please", "zh--cn", "1234"])
def test_malformed_tags_are_unsupported_languages(tag: str) -> None:
    with pytest.raises(InvalidRequest) as info:
        normalise_tag(tag)
    assert info.value.code is ErrorCode.UNSUPPORTED_LANGUAGE
    assert repr(tag) in info.value.message


@pytest.mark.parametrize(("text", "expected"), [
    ("今天天气很好", "zh"), ("Good morning", "en"), ("OK 好的好的好的", "zh"), ("", "en"),
    ("佢哋今日唔喺度", "yue"), ("我哋去飲茶啦，你嚟唔嚟？", "yue"), ("他们今天不在这里", "zh"),
    ("こんにちは、世界", "ja"), ("東京へ行きます", "ja"), ("안녕하세요", "ko"),
    ("Привет, мир", "ru"), ("Καλημέρα", "el"), ("12345", "en"),
    ("I bought a 手机 yesterday in the morning at the shop", "en"),
])
def test_detection_by_script(text: str, expected: str) -> None:
    assert detect(text) == expected
    assert guess_language(text) == expected
