from __future__ import annotations

import pytest

from pipeline.engines.base import StyleHints
from pipeline.frontend import prepare
from topics.errors import ErrorCode, InvalidRequest


def test_chinese_request_is_detected_normalised_split_and_keeps_annotations() -> None:
    out = prepare("你好[h][ào]！今天是2024年5月1日，气温25℃。我们买2个苹果吧。",
                  language=None, instruct=None)
    assert out.language == "zh"
    assert out.detected
    assert out.sentences == ["你好[h][ào]！", "今天是二零二四年五月一日，气温二十五摄氏度。",
                             "我们买两个苹果吧。"]
    assert out.style == StyleHints()


def test_given_language_is_normalised_and_not_detected() -> None:
    out = prepare("I read[R][EH1][D] 3 books. Dr. Smith paid $3.99!", language="en-US",
                  instruct="slowly, like a news anchor")
    assert (out.language, out.detected) == ("en", False)
    assert out.sentences == ["I read[R][EH1][D] three books.",
                             "Dr. Smith paid three dollars and ninety-nine cents!"]
    assert out.style == StyleHints(persona="news_anchor", speed=0.8,
                                   free_text="slowly, like a news anchor")


def test_a_dialect_routes_chinese_text_when_no_language_is_given() -> None:
    out = prepare("今日天气好好。", language=None, instruct="用粤语说")
    assert (out.language, out.detected, out.style.dialect) == ("yue", True, "cantonese")
    # ...but a language the request names wins, and English text is not re-routed.
    assert prepare("今日天气好好。", language="zh", instruct="用粤语说").language == "zh"
    assert prepare("Good morning.", language=None, instruct="in Cantonese").language == "en"


def test_cantonese_text_is_detected() -> None:
    assert prepare("佢哋今日唔喺度。", language=None, instruct=None).language == "yue"


def test_same_sentence_with_and_without_annotation_differ_only_in_the_markup() -> None:
    plain = prepare("你好，世界。", language="zh", instruct=None)
    marked = prepare("你好[h][ào]，世界。", language="zh", instruct=None)
    assert marked.sentences == ["你好[h][ào]，世界。"]
    assert plain.sentences == ["你好，世界。"]


def test_bad_annotation_is_an_invalid_request_with_its_position() -> None:
    with pytest.raises(InvalidRequest) as info:
        prepare("今天天气好[hx][ao]。", language=None, instruct=None)
    assert info.value.code is ErrorCode.INVALID_REQUEST
    assert info.value.message == ("invalid pinyin annotation [hx][ao] at char 5: "
                                  "'hx' is not a pinyin initial")


def test_text_too_long_after_normalisation_reports_the_measured_length() -> None:
    text = "12345 " * 300  # 1,800 characters in, far more once the numbers are words
    with pytest.raises(InvalidRequest) as info:
        prepare(text, language="en", instruct=None)
    assert info.value.code is ErrorCode.TEXT_TOO_LONG
    expected = len(" ".join(["twelve thousand three hundred and forty-five"] * 300))
    assert info.value.message == (f"text is {expected} characters after normalisation; "
                                  "the limit is 2000")
    assert prepare("12345", language="en", instruct=None, max_chars=50).sentences


def test_malformed_or_unsupported_language() -> None:
    with pytest.raises(InvalidRequest) as info:
        prepare("hi", language="not a tag", instruct=None)
    assert info.value.code is ErrorCode.UNSUPPORTED_LANGUAGE
    with pytest.raises(InvalidRequest) as info:
        prepare("hi", language="tlh", instruct=None, languages=("zh", "yue", "en"))
    assert info.value.code is ErrorCode.UNSUPPORTED_LANGUAGE
    assert info.value.message == ("language 'tlh' is not supported by this engine; "
                                  "supported: en, yue, zh")
    assert prepare("hi", language="en-GB", instruct=None,
                   languages=("en",)).language == "en-gb"


def test_nothing_to_speak_is_rejected() -> None:
    with pytest.raises(InvalidRequest, match="nothing to speak"):
        prepare(" 。，！ ", language=None, instruct=None)


def test_long_text_becomes_pieces_within_the_limit() -> None:
    text = "，".join(["这是一个比较长的分句"] * 30) + "。"
    out = prepare(text, language="zh", instruct=None)
    assert len(out.sentences) > 3
    assert all(len(s) <= 80 for s in out.sentences)
    assert "".join(out.sentences) == text
    assert all(len(s) <= 20 for s in prepare(text, language="zh", instruct=None,
                                             max_piece_chars=20).sentences)


def test_private_use_characters_in_client_text_cannot_forge_annotations() -> None:
    out = prepare("好\ue000[h][ào]的", language="zh", instruct=None)
    assert out.sentences == ["好[h][ào]的"]
