from __future__ import annotations

import pytest

from pipeline.text.annotations import (
    ControlTag,
    PhonemeAnnotation,
    PinyinAnnotation,
    find,
    mask,
    segments,
    unmask,
)
from topics.errors import ErrorCode, InvalidRequest


def test_pinyin_with_tone_mark_or_digit_and_zero_initial() -> None:
    text = "你好[h][ào]，爱[][ài]，绿[l][v4]，女[n][ǚ]"
    expected = []
    for markup, syllable in [("[h][ào]", "hao4"), ("[][ài]", "ai4"), ("[l][v4]", "lv4"),
                             ("[n][ǚ]", "nv3")]:
        start = text.index(markup)
        expected.append(PinyinAnnotation(start, start + len(markup), start - 1, syllable))
    assert find(text) == expected


def test_neutral_tone_is_five() -> None:
    [a] = find("的[d][e5]")
    assert isinstance(a, PinyinAnnotation)
    assert a.syllable == "de5"


def test_arpabet_after_a_word_replaces_it_and_alone_is_spoken() -> None:
    text = "I read[R][EH1][D] it, [HH][AH0][L][OW1]!"
    first, second = text.index("[R]"), text.index("[HH]")
    assert find(text) == [PhonemeAnnotation(first, text.index(" it"), ("R", "EH1", "D"), 2),
                          PhonemeAnnotation(second, len(text) - 1, ("HH", "AH0", "L", "OW1"),
                                            None)]


def test_brackets_that_are_not_annotations_are_left_alone() -> None:
    assert find("see [1] and 中国[1][2], the [UK] team, [sic], [NASA]") == []
    assert find("笑[laughter]了[breath]") == [ControlTag(1, 11, "laughter"),
                                             ControlTag(12, 20, "breath")]


@pytest.mark.parametrize(("text", "message"), [
    ("你好[hx][ao]", "invalid pinyin annotation [hx][ao] at char 2: 'hx' is not a pinyin initial"),
    ("你好[h][ao]", "'ao' has no tone: add a mark (ào) or a digit 1-5 (ao4)"),
    ("你好[h][ao6]", "'ao6': tone digit must be 1-5 (5 = neutral)"),
    ("你好[h][ǎo3]", "'ǎo3' has both a tone mark and a tone digit"),
    ("你好[h][ǎó]", "'ǎó' has 2 tone marks; a syllable has one"),
    ("你好[h][xyz1]", "'xyz' is not a pinyin final"),
    ("你好[h][ia1]", "'h' + 'ia' is not a Mandarin syllable"),
    ("hello[h][ao3]", "invalid pinyin annotation [h][ao3] at char 5: it must follow the Han"),
    ("你好[hao3]", "invalid pinyin annotation [hao3] at char 2: write the initial and the final"),
    ("say [HH][AH3]", "invalid phoneme annotation [HH][AH3] at char 4: 'AH3' has stress 3"),
    ("say [HH][AH]", "'AH' is a vowel and needs a stress digit 0, 1 or 2 (e.g. AH1)"),
    ("say [K1]", "'K1' is a consonant and takes no stress digit"),
    ("say [HH][AX0]", "'AX' is not an ARPAbet phoneme"),
])
def test_malformed_annotations_are_invalid_requests_naming_markup_and_position(
        text: str, message: str) -> None:
    with pytest.raises(InvalidRequest) as info:
        find(text)
    assert info.value.code is ErrorCode.INVALID_REQUEST
    assert message in info.value.message
    assert not info.value.retryable


def test_mask_and_unmask_round_trip_and_hide_digits() -> None:
    text = "好[h][ao4] and read[R][EH1][D] [breath] 12"
    found = find(text)
    masked = mask(text, found)
    assert "[" not in masked
    assert sum(ch.isdigit() for ch in masked) == 2  # only the "12" is left for normalisation
    assert unmask(masked, text, found) == text


def test_segments_give_plain_text_and_overrides() -> None:
    seg = segments("你好[h][ào]，read[R][EH1][D]. [breath]ok")
    assert seg.plain == "你好，read. ok"
    assert seg.pinyin == {1: "hao4"}
    assert seg.phonemes == [(3, 7, ("R", "EH1", "D"))]


def test_inpainting_form_puts_the_markup_in_place_of_what_it_reads() -> None:
    from pipeline.text.annotations import inpainting_form

    assert inpainting_form("好[h][ào]的") == "[h][ào]的"
    assert inpainting_form("I read[R][EH1][D] it") == "I [R][EH1][D] it"
    assert inpainting_form("say [HH][AH0][L][OW1] [breath] now [1]") == \
        "say [HH][AH0][L][OW1] [breath] now [1]"
